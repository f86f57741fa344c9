package conversation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

var errInjected = errors.New("injected database failure")

type faultMode int

const (
	failBefore faultMode = iota + 1 // the write is not made
	failAfter                       // the write commits, but the caller is told it failed
)

type fault struct {
	mode  faultMode
	times int   // how many calls fail; <0 for all
	err   error // what they fail with (errInjected when nil)
}

// faultStore is the real store with failures injected per method: the database is real,
// only the answers are lost.
type faultStore struct {
	*store.Store
	mu     sync.Mutex
	faults map[string]fault
}

func newFaultStore(t *testing.T) *faultStore {
	return &faultStore{Store: storetest.New(t), faults: map[string]fault{}}
}

func (f *faultStore) set(method string, mode faultMode, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[method] = fault{mode, times, nil}
}

// setErr makes method fail times times (<0: always) with err, without writing.
func (f *faultStore) setErr(method string, err error, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[method] = fault{failBefore, times, err}
}

func (f *faultStore) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.faults)
}

func (f *faultStore) do(method string, write func() error) error {
	f.mu.Lock()
	ft, ok := f.faults[method]
	if ok && ft.times != 0 {
		ft.times--
		f.faults[method] = ft
	} else {
		ok = false
	}
	f.mu.Unlock()
	if !ok {
		return write()
	}
	if ft.mode == failAfter {
		if err := write(); err != nil {
			return err
		}
	}
	if ft.err != nil {
		return ft.err
	}
	return errInjected
}

func (f *faultStore) MessageInsert(ctx context.Context, m chat.Message) error {
	return f.do("MessageInsert", func() error { return f.Store.MessageInsert(ctx, m) })
}

func (f *faultStore) MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error {
	return f.do("MessageUpdate", func() error { return f.Store.MessageUpdate(ctx, m, from...) })
}

func (f *faultStore) RunUpdate(ctx context.Context, r chat.Run, from ...chat.RunStatus) error {
	return f.do("RunUpdate", func() error { return f.Store.RunUpdate(ctx, r, from...) })
}

func (f *faultStore) RunStartCounted(ctx context.Context, r chat.Run, m chat.Message, maxActive int) (active int, err error) {
	err = f.do("RunStart", func() (err error) {
		active, err = f.Store.RunStartCounted(ctx, r, m, maxActive)
		return err
	})
	return active, err
}

func (f *faultStore) SessionOpen(ctx context.Context, id uuid.UUID, req store.OpenRequest) (o store.Opened, err error) {
	err = f.do("SessionOpen", func() (err error) {
		o, err = f.Store.SessionOpen(ctx, id, req)
		return err
	})
	return o, err
}

func (f *faultStore) RunByRequest(ctx context.Context, sessionID uuid.UUID, requestID string) (chat.Run, error) {
	var r chat.Run
	err := f.do("RunByRequest", func() error {
		var err error
		r, err = f.Store.RunByRequest(ctx, sessionID, requestID)
		return err
	})
	return r, err
}

// faultSetup starts an actor on a fault-injecting store with one subscriber. A nil clock
// means a fake clock nobody advances.
func faultSetup(t *testing.T, agent conversation.Agent, clock *clockwork.FakeClock) (*faultStore, *conversation.Actor, *convtest.Recorder) {
	t.Helper()
	st := newFaultStore(t)
	if clock == nil {
		clock = clockwork.NewFakeClock()
	}
	a := startActorWithClock(t, st, agent, clock)
	// Cleanups run last first: the database answers again before the actor stops, or
	// its stop would spend its whole budget retrying.
	t.Cleanup(st.clear)
	live := convtest.New()
	_, err := a.Hello(context.Background(), conversation.HelloRequest{Create: true, Subscriber: live})
	require.NoError(t, err)
	return st, a, live
}

// stored returns a session's messages as the database has them, in wire form.
func stored(t *testing.T, st *store.Store, sessionID uuid.UUID) []chat.Message {
	t.Helper()
	msgs, _, err := st.MessagesBefore(context.Background(), sessionID, 0, 1000)
	require.NoError(t, err)
	return msgs
}

// snapshotOf subscribes a new subscriber and returns the messages of its snapshot.
func snapshotOf(t *testing.T, a *conversation.Actor) []chat.Message {
	t.Helper()
	s := convtest.New()
	_, err := a.Hello(context.Background(), conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	f := s.AwaitCatchUp(t, 1).Snapshot
	a.Unsubscribe(context.Background(), s)
	return f.Messages
}

// waitTimers waits until clock has at least n timers, whoever armed them (the actor,
// its journal's retries, a Deadlines service on the same clock). n must be positive:
// every clock has at least zero timers, so no wait can show that one is not armed.
func waitTimers(t *testing.T, clock *clockwork.FakeClock, n int) {
	t.Helper()
	if n < 1 {
		t.Fatalf("waitTimers(%d) would return at once and show nothing", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, n))
}

// A segment whose closing write fails: clients were told it is complete, so snapshots
// say so too, and the write is retried until the database has it. The run, which goes
// on streaming meanwhile (the write is stored behind), fails once the failure is known.
func TestFailedUpdateIsShownAndRetried(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	gate := script.NewGate()
	st, a, live := faultSetup(t, script.New(script.Text("hello", " world"), gate.Wait(), script.Tool("c1", "t", `{}`, "out"), script.Hang()), clock)
	ctx := context.Background()
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" && f.Text == " world" })

	st.set("MessageUpdate", failBefore, -1)
	require.NoError(t, gate.Pass(testCtx(t)))
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.error", end.Type)
	require.Equal(t, "storage", end.Run.Error.Code)

	// The live subscriber saw the segment complete; the database still has it open, and
	// the writes queued behind it wait.
	_ = a.Flush(ctx)
	view := live.Messages()
	require.Equal(t, "hello world", view[1].Content)
	require.EqualValues(t, "complete", view[1].Status)
	db := stored(t, st.Store, a.SessionID())
	require.Equal(t, "", db[1].Content)
	require.EqualValues(t, "streaming", db[1].Status)

	// A new tab sees what the live one sees.
	require.Empty(t, convtest.Diff(view, snapshotOf(t, a)))

	// With nobody watching, the only timer is the retry: an actor with unsaved writes is
	// not idle, so it is not evicted (which would lose them).
	a.Unsubscribe(ctx, live)
	// Retried with backoff while the database keeps failing: after 1s, then 2s more.
	waitTimers(t, clock, 1)
	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // the failed retry re-armed itself
	st.clear()
	clock.Advance(time.Second) // not yet: the second retry waits 2s
	require.EqualValues(t, "streaming", stored(t, st.Store, a.SessionID())[1].Status)
	clock.Advance(time.Second)
	// The write succeeds; with nothing left to store the actor turns idle and arms its
	// eviction timer, so once that timer exists the database must hold the segment.
	waitTimers(t, clock, 1)
	require.Empty(t, convtest.Diff(view, stored(t, st.Store, a.SessionID())))
	require.Empty(t, convtest.Diff(view, snapshotOf(t, a)))
}

// A run whose final write fails is over for its clients at once; its stored status
// follows on a retry, and a repeat of its request sees the status clients were told.
func TestFailedRunEndIsShownAndRetried(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	st, a, live := faultSetup(t, script.New(script.Text("done soon")), clock)
	ctx := context.Background()

	st.set("RunUpdate", failBefore, -1)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", live.Await(t, convtest.Terminal).Type)

	run, err := st.Store.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status, "the failed write did not reach the database")

	again, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.Equal(t, conversation.SendResult{RunID: res.RunID, Duplicate: true, Status: chat.RunDone}, again)

	a.Unsubscribe(ctx, live)
	st.clear()
	waitTimers(t, clock, 1) // the retry
	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // now the idle timer: everything is stored
	run, err = st.Store.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)
}

// An insert that reports failure but committed: the run goes on (its rows are stored
// behind it), the insert is retried, finds its row and counts as stored, and what is
// queued behind it follows in order, so the row ends with what clients were told. The
// next message gets the next position.
func TestLostInsertIsRetried(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	gate := script.NewGate()
	st, a, live := faultSetup(t, script.New(script.Text("shown"), gate.Wait(), script.Text(" and more")), clock)
	ctx := context.Background()

	st.set("MessageInsert", failAfter, 1)
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })

	// Stored, though the writer was told it failed: the queue waits for its retry.
	waitTimers(t, clock, 1) // the retry
	db := stored(t, st.Store, a.SessionID())
	require.Len(t, db, 2)
	require.EqualValues(t, "streaming", db[1].Status)
	clock.Advance(time.Second)
	require.NoError(t, gate.Pass(testCtx(t)))
	require.EqualValues(t, "chat.done", live.Await(t, convtest.Terminal).Type)
	require.NoError(t, a.Flush(ctx))
	db = stored(t, st.Store, a.SessionID())
	require.Empty(t, convtest.Diff(live.Messages(), db))
	require.EqualValues(t, "complete", db[1].Status)
	require.Equal(t, "shown and more", db[1].Content)

	// The next run takes the next position.
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "again"})
	require.NoError(t, err)
	require.NoError(t, gate.Pass(testCtx(t))) // each run of the script waits at the gate
	require.EqualValues(t, "chat.done", live.Await(t, func(f *conversation.Event) bool {
		return convtest.Terminal(f) && f.RequestID == "r2"
	}).Type)
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, convtest.Diff(live.Messages(), stored(t, st.Store, a.SessionID())))
}

// A RunStart whose answer was lost after it committed: the actor finds the run stored
// and carries on.
func TestRunStartCommittedDespiteError(t *testing.T) {
	t.Parallel()
	st, a, live := faultSetup(t, script.New(script.Text("hi")), nil)
	ctx := context.Background()

	st.set("RunStart", failAfter, 1)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	require.EqualValues(t, "chat.done", live.Await(t, convtest.Terminal).Type)
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, convtest.Diff(stored(t, st.Store, a.SessionID()), live.Messages()))
}

// When even the check fails, the client is told storage failed; its retry of the same
// request finds the run stored as running with no agent, and starts it.
func TestRunStartLostThenRetried(t *testing.T) {
	t.Parallel()
	st, a, live := faultSetup(t, script.New(script.Text("adopted")), nil)
	ctx := context.Background()

	st.set("RunStart", failAfter, 1)
	st.set("RunByRequest", failBefore, 1)
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, conversation.CodeStorage, ce.Code)

	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	require.Equal(t, chat.RunRunning, res.Status)
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.done", end.Type)
	require.Equal(t, res.RunID, end.RunID)

	msgs := live.Messages()
	require.Len(t, msgs, 2)
	require.Equal(t, "go", msgs[0].Content)
	require.Equal(t, "adopted", msgs[1].Content)
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, convtest.Diff(stored(t, st.Store, a.SessionID()), msgs))
}

// A decision the database cannot store is not heard: the approved call does not run
// while the database still says it waits for a person, and no tool.update announces the
// approval. The decider is told, and the run ends as a storage error.
func TestUnstoredDecisionIsNotHeard(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	st, a, live := faultSetup(t, script.New(script.Approval("c1", "deploy", `{}`, "deployed", decided)), nil)
	ctx := context.Background()
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool {
		return f.Type == "run.status" && f.Run.Status == chat.RunAwaitingApproval
	})
	require.NoError(t, a.Flush(ctx))

	st.set("MessageUpdate", failBefore, -1)
	_, err = a.Decide(ctx, res.RunID, "c1", true)
	requireCode(t, err, conversation.CodeStorage)
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.error", end.Type)
	require.Equal(t, "storage", end.Run.Error.Code)
	for _, e := range live.Events() {
		// The approval was never stored, so it was never announced either.
		require.False(t, e.Type == "tool.update" && e.Message != nil && e.Message.Tool != nil && e.Message.Tool.Decision != nil, "announced: %+v", e.Message)
	}
	select {
	case d := <-decided:
		t.Fatalf("the agent heard the decision %+v", d)
	default:
	}
}

// A send whose start the database refuses for good is not told the database is
// unavailable: a value it cannot take (SQLSTATE class 22) is bad_request, another
// refusal internal; a failure that may pass stays storage. Nothing is started.
func TestRefusedSendIsNoOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		code string
	}{
		{fmt.Errorf("%w: %w", store.ErrInvalid, &pgconn.PgError{Code: "22021", Message: "invalid byte sequence for encoding \"UTF8\": 0xff"}), conversation.CodeBadRequest},
		{fmt.Errorf("%w: %w", store.ErrInvalid, &pgconn.PgError{Code: "42703", Message: "column does not exist"}), conversation.CodeInternal},
		{errInjected, conversation.CodeStorage},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			st, a, live := faultSetup(t, script.New(script.Text("hi")), nil)
			ctx := context.Background()
			st.setErr("RunStart", tc.err, 1)
			_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
			var ce *conversation.Error
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.code, ce.Code, "%v", ce)
			if tc.code != conversation.CodeStorage {
				require.NotContains(t, ce.Message, "unavailable")
				require.Contains(t, ce.Message, "SQLSTATE "+store.SQLState(tc.err))
			}
			require.NoError(t, a.Flush(ctx))
			require.Empty(t, stored(t, st.Store, a.SessionID()), "nothing was started")
			require.Empty(t, live.Messages())
		})
	}
}

// A message sent with whileRunning interrupt while the database does not answer leaves
// the active run alone: the message cannot be stored, so nothing is cancelled for it.
// Sent again once the database answers, it interrupts as usual.
func TestInterruptWhileTheDatabaseIsDownCancelsNothing(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	st, a, live := faultSetup(t, script.PerRun(func(req conversation.Request) []script.Step {
		if req.Content == "first" {
			return []script.Step{script.Text("partial"), gate.Wait(), script.Text(" rest")}
		}
		return []script.Step{script.Text("second answer")}
	}), nil)
	ctx := context.Background()
	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "first"})
	require.NoError(t, err)
	live.Await(t, func(e *conversation.Event) bool { return e.Type == "chat.delta" })

	st.set("RunByRequest", failBefore, -1)
	st.set("RunStart", failBefore, -1)
	interrupt := conversation.SendRequest{RequestID: "r2", Content: "second", WhileRunning: chat.DoubleTextInterrupt}
	_, err = a.Send(ctx, interrupt)
	requireCode(t, err, conversation.CodeStorage)
	info, err := a.Run(ctx, first.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, info.Status, "the run goes on")
	for _, e := range live.Events() {
		require.NotEqual(t, "chat.cancelled", string(e.Type))
	}

	st.clear()
	res, err := a.Send(ctx, interrupt)
	require.NoError(t, err)
	require.NotEqual(t, first.RunID, res.RunID)
	end := live.Await(t, func(e *conversation.Event) bool { return convtest.Terminal(e) && e.RunID == res.RunID })
	require.EqualValues(t, "chat.done", end.Type)
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, convtest.Diff(stored(t, st.Store, a.SessionID()), live.Messages()))
}
