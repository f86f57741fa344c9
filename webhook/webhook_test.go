package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/webhook"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// The Standard Webhooks specification's own example signs to its own signature.
func TestSignMatchesTheSpecification(t *testing.T) {
	key, err := webhook.ParseSecret(secret)
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		webhook.Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)))

	for _, bad := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="} {
		_, err := webhook.ParseSecret(bad)
		require.Error(t, err, bad)
	}
}

// delivery is one request the receiver got.
type delivery struct {
	id, timestamp, signature string
	body                     []byte
}

// receiver answers each request with the status its func gives (200 when nil).
type receiver struct {
	mu     sync.Mutex
	got    []delivery
	status func(n int) int
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.got = append(r.got, delivery{req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"), req.Header.Get("webhook-signature"), body})
	n := len(r.got)
	status := r.status
	r.mu.Unlock()
	if status != nil {
		w.WriteHeader(status(n))
	}
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	clock *clockwork.FakeClock
	recv  *receiver
	url   string
	sess  chat.Session
	pos   int64 // the last message's position
}

func setup(t *testing.T) *fixture {
	t.Helper()
	t.Parallel()
	st := storetest.New(t)
	st.EnableWebhooks()
	recv := &receiver{}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	sess, err := st.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: clock.Now()})
	require.NoError(t, err)
	return &fixture{t: t, ctx: ctx, st: st, clock: clock, recv: recv, url: srv.URL, sess: sess}
}

func (f *fixture) deliverer() *webhook.Deliverer {
	d, err := webhook.New(webhook.Config{URL: f.url, Secret: secret, Store: f.st, Clock: f.clock, Logger: zerolog.New(zerolog.NewTestWriter(f.t)).Level(zerolog.ErrorLevel)})
	require.NoError(f.t, err)
	return d
}

// run starts a run and moves it through statuses, each stored as the actor stores it.
func (f *fixture) run(statuses ...chat.RunStatus) chat.Run {
	f.t.Helper()
	now := f.clock.Now()
	run := chat.Run{ID: uuid.New(), SessionID: f.sess.ID, RequestID: uuid.NewString(), Status: chat.RunRunning, StartedAt: now, LastActivityAt: now, Model: "scripted"}
	f.pos++
	user := chat.Message{ID: uuid.New(), SessionID: f.sess.ID, RunID: &run.ID, Position: f.pos, Role: chat.RoleUser, Content: "hi", Status: chat.MessageComplete, CreatedAt: now}
	require.NoError(f.t, f.st.RunStart(f.ctx, run, user, 0))
	for _, st := range statuses {
		from := run.Status
		run.Status = st
		run.PendingApproval = nil
		if st == chat.RunAwaitingApproval {
			run.PendingApproval = &chat.PendingApproval{ToolCallID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"ls"}`)}
		}
		if !st.Active() {
			end := f.clock.Now()
			run.EndedAt = &end
		}
		if st == chat.RunError {
			run.Error = &chat.ErrorInfo{Code: "provider_error", Message: "the model failed"}
		}
		require.NoError(f.t, f.st.RunUpdate(f.ctx, run, from))
	}
	return run
}

type event struct {
	Type      string
	Timestamp time.Time
	Data      struct {
		RunID           uuid.UUID
		SessionID       uuid.UUID
		Status          string
		Error           *struct{ Code, Message string }
		PendingApproval *struct{ ToolCallID, Name, InputHash string }
	}
}

func (f *fixture) decode(d delivery) event {
	f.t.Helper()
	key, err := webhook.ParseSecret(secret)
	require.NoError(f.t, err)
	ts, err := strconv.ParseInt(d.timestamp, 10, 64)
	require.NoError(f.t, err)
	require.Equal(f.t, webhook.Sign(key, d.id, ts, d.body), d.signature, "signed")
	var ev event
	require.NoError(f.t, json.Unmarshal(d.body, &ev))
	return ev
}

// Each status change that has an event queues it with the change, and it is delivered
// once, signed: the run's end, its failure, its cancellation, a wait for a person (each
// time it waits). A status written again queues nothing.
func TestEventsAreQueuedWithTheChangeAndDeliveredOnce(t *testing.T) {
	f := setup(t)
	approval := f.run(chat.RunAwaitingApproval, chat.RunRunning, chat.RunAwaitingApproval, chat.RunRunning, chat.RunDone)
	failed := f.run(chat.RunError)
	cancelled := f.run(chat.RunCancelled)
	f.run() // still running: nothing
	again := f.run(chat.RunAwaitingApproval)
	require.NoError(t, f.st.RunUpdate(f.ctx, again, chat.RunAwaitingApproval), "the same status, stored again")

	d := f.deliverer()
	require.Equal(t, 6, d.Poll(f.ctx))
	require.Equal(t, 0, d.Poll(f.ctx), "each is sent once")
	var got []string
	ids := map[string]bool{}
	for _, dl := range f.recv.deliveries() {
		ev := f.decode(dl)
		got = append(got, ev.Data.RunID.String()[:8]+" "+ev.Type+" "+ev.Data.Status)
		require.Equal(t, f.sess.ID, ev.Data.SessionID)
		ids[dl.id] = true
		switch ev.Type {
		case "run.awaiting_approval":
			require.NotNil(t, ev.Data.PendingApproval)
			require.Equal(t, "shell", ev.Data.PendingApproval.Name)
			require.Equal(t, chat.InputHash(json.RawMessage(`{"command":"ls"}`)), ev.Data.PendingApproval.InputHash)
		case "run.failed":
			require.Equal(t, "provider_error", ev.Data.Error.Code)
		}
	}
	require.Len(t, ids, 6, "every event has its own id")
	short := func(r chat.Run) string { return r.ID.String()[:8] }
	require.ElementsMatch(t, []string{
		short(approval) + " run.awaiting_approval awaiting_approval",
		short(approval) + " run.awaiting_approval awaiting_approval",
		short(approval) + " run.completed done",
		short(failed) + " run.failed error",
		short(cancelled) + " run.cancelled cancelled",
		short(again) + " run.awaiting_approval awaiting_approval",
	}, got)
	stats, err := f.st.WebhookStats(f.ctx)
	require.NoError(t, err)
	require.Equal(t, store.WebhookStats{Delivered: 6}, stats)
}

// A failed attempt is tried again after its backoff, with the same id, and given up
// after the last; two nodes polling at once never send one event twice.
func TestFailedAttemptsAreRetriedThenGivenUp(t *testing.T) {
	f := setup(t)
	f.recv.status = func(int) int { return http.StatusServiceUnavailable }
	f.run(chat.RunDone)
	d := f.deliverer()
	require.Equal(t, 1, d.Poll(f.ctx))
	require.Equal(t, 0, d.Poll(f.ctx), "not due again before its backoff")
	for i, wait := range webhook.Backoff {
		f.clock.Advance(wait - time.Millisecond)
		require.Equal(t, 0, d.Poll(f.ctx), "attempt %d: early", i+2)
		f.clock.Advance(time.Millisecond)
		require.Equal(t, 1, d.Poll(f.ctx), "attempt %d", i+2)
	}
	f.clock.Advance(24 * time.Hour)
	require.Equal(t, 0, d.Poll(f.ctx), "given up")
	got := f.recv.deliveries()
	require.Len(t, got, len(webhook.Backoff)+1)
	for _, dl := range got {
		require.Equal(t, got[0].id, dl.id, "a redelivery keeps its id")
		f.decode(dl)
	}
	stats, err := f.st.WebhookStats(f.ctx)
	require.NoError(t, err)
	require.Equal(t, store.WebhookStats{Failed: 1}, stats)
	recent, err := f.st.WebhookRecent(f.ctx, 10)
	require.NoError(t, err)
	require.Len(t, recent, 1)
	require.Contains(t, recent[0].LastError, "503")
	require.NotNil(t, recent[0].FailedAt)

	// Two nodes at once.
	f.recv.status = nil
	for range 20 {
		f.run(chat.RunDone)
	}
	other := f.deliverer()
	var wg sync.WaitGroup
	var a, b int
	wg.Go(func() { a = d.Poll(f.ctx) + d.Poll(f.ctx) })
	wg.Go(func() { b = other.Poll(f.ctx) + other.Poll(f.ctx) })
	wg.Wait()
	require.Equal(t, 20, a+b)
	seen := map[string]int{}
	for _, dl := range f.recv.deliveries()[len(got):] {
		seen[dl.id]++
	}
	require.Len(t, seen, 20)
	for id, n := range seen {
		require.Equal(t, 1, n, id)
	}
}
