package conversation_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// countingAgent counts the runs its agent was asked to answer: the model calls a paid
// provider would bill.
type countingAgent struct {
	conversation.Agent
	calls atomic.Int32
}

func (c *countingAgent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	c.calls.Add(1)
	return c.Agent.Run(ctx, req, out)
}

// A model that ends a reasoning block with a NUL in its provider data (valid JSON, which
// jsonb refuses): the data is cleaned where it enters, so the run completes, everything
// is stored, nothing waits for a retry and the session goes idle, and the stored
// transcript is what clients saw.
func TestNULInProviderDataIsStoredCleaned(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	a := startActorWithClock(t, st, script.New(script.Reasoning(`{"signature":"a\u0000b"}`, "thinking"), script.Text("answer")), clock)
	ctx := testCtx(t)
	live := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: live})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", live.Await(t, convtest.Terminal).Type)
	require.NoError(t, a.Flush(ctx), "nothing waits for a retry")

	db := stored(t, st, a.SessionID())
	require.Empty(t, convtest.Diff(live.Messages(), db))
	require.Len(t, db, 3)
	require.JSONEq(t, `{"signature":"a\ufffdb"}`, string(db[1].ProviderData))
	run, err := st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)

	a.Unsubscribe(ctx, live)
	waitTimers(t, clock, 1) // the idle timer: the actor goes
	clock.Advance(conversation.DefaultIdleTimeout)
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the idle actor was not evicted")
	}
}

// A write the database will never take (here a value it refuses, SQLSTATE 22P05) is
// given up at once: logged, counted by SQLSTATE, its run ends as a storage error whose
// end is stored, and the session goes idle: nothing is retried.
func TestPermanentFailureEndsTheRunAndLetsTheSessionGo(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	gate := script.NewGate()
	a := startMetered(t, st, script.New(script.Text("hello"), gate.Wait(), script.Tool("c1", "t", `{}`, "out"), script.Text("never")), nil)
	t.Cleanup(st.clear)
	ctx := testCtx(t)
	live := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: live})
	require.NoError(t, err)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	require.NoError(t, a.Flush(ctx))

	st.setErr("MessageUpdate", fmt.Errorf("%w: %w", store.ErrInvalid, &pgconn.PgError{Code: "22P05", Message: "unsupported Unicode escape sequence"}), 1)
	require.NoError(t, gate.Pass(ctx))
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.error", end.Type)
	require.Equal(t, "storage", end.Run.Error.Code)
	require.NoError(t, a.Flush(ctx), "given up, not kept for a retry")

	run, err := st.Store.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunError, run.Status, "its end is stored")
	require.Equal(t, "storage", run.Error.Code)
	for _, m := range stored(t, st.Store, a.SessionID()) {
		require.NotEqual(t, chat.MessageStreaming, m.Status, "nothing is left streaming: %+v", m)
	}
	require.EqualValues(t, 1, a.value(t, "chatd_journal_write_failures_total", "failure", "permanent", "sqlstate", "22P05"))

	a.Unsubscribe(ctx, live)
	waitTimers(t, a.clock, 1) // the idle timer, no retry
}

// A session deleted while its run streams, by another node (here: by the store, as
// another node's deletion is): the next write finds the run's row gone, the run ends
// with an error that says so, the tabs are let go as for a deletion, nothing is retried,
// and the actor goes.
func TestSessionDeletedElsewhereEndsTheRun(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	gate := script.NewGate()
	a := startMetered(t, st, script.New(script.Text("hello"), gate.Wait(), script.Tool("c1", "t", `{}`, "out"), script.Hang()), nil)
	ctx := testCtx(t)
	live := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "alice", Subscriber: live})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	require.NoError(t, a.Flush(ctx))

	require.NoError(t, st.Store.SessionDelete(ctx, "alice", a.SessionID(), time.Now()))
	require.NoError(t, gate.Pass(ctx))
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.error", end.Type)
	require.Equal(t, conversation.CodeNotFound, end.Run.Error.Code)
	require.Contains(t, end.Run.Error.Message, "deleted")
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the actor of a deleted session did not stop")
	}
	require.Contains(t, live.DropReasons(), conversation.DropDeleted)
	require.GreaterOrEqual(t, a.value(t, "chatd_journal_write_failures_total", "failure", "gone", "sqlstate", "23503"), 1.0)
}

// A refused start never reaches the model: five repeats of an ended run's requestId (in
// the actor that ran it, and in a new one that knows the session only from the
// database), and five starts over the owner's limit of active runs, call the agent zero
// times.
func TestRefusedStartsNeverReachTheModel(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := &countingAgent{Agent: script.PerRun(func(req conversation.Request) []script.Step {
		if req.Content == "wait" {
			return []script.Step{script.Text("working"), script.Hang()}
		}
		return []script.Step{script.Text("done")}
	})}
	counts := &conversation.RunCounts{}
	limited := func(c *conversation.Config) { c.MaxRunsPerUser, c.RunCounts = 1, counts }
	ctx := testCtx(t)
	hello := func(a *conversation.Actor, create bool) *convtest.Recorder {
		s := convtest.New()
		_, err := a.Hello(ctx, conversation.HelloRequest{Create: create, Owner: "alice", Subscriber: s})
		require.NoError(t, err)
		return s
	}

	first := startActorWithClock(t, st, agent, clockwork.NewFakeClock(), limited)
	tab := hello(first, true)
	res, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hi"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", tab.Await(t, convtest.Terminal).Type)
	require.NoError(t, first.Flush(ctx))
	require.EqualValues(t, 1, agent.calls.Load())
	for range 5 {
		again, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hi"})
		require.NoError(t, err)
		require.Equal(t, conversation.SendResult{RunID: res.RunID, Duplicate: true, Status: chat.RunDone}, again)
	}
	// A new actor of the session (another node, or after an eviction) knows it only
	// from the database.
	same := conversation.Start(conversation.Config{Store: st, Agent: agent, Clock: clockwork.NewFakeClock(), MaxRunsPerUser: 1, RunCounts: counts,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)}, first.SessionID(), nil)
	t.Cleanup(func() { require.NoError(t, same.Stop(context.Background())) })
	for range 5 {
		again, err := same.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hi"})
		require.NoError(t, err)
		require.True(t, again.Duplicate)
	}
	require.EqualValues(t, 1, agent.calls.Load(), "repeats called the model")

	// One active run is alice's limit: her sends in another session are refused.
	busy, err := first.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "wait"})
	require.NoError(t, err)
	tab.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" && f.RunID == busy.RunID })
	other := startActorWithClock(t, st, agent, clockwork.NewFakeClock(), limited)
	hello(other, true)
	for i := range 5 {
		_, err := other.Send(ctx, conversation.SendRequest{RequestID: fmt.Sprintf("over-%d", i), Content: "hi"})
		requireCode(t, err, conversation.CodeRateLimited)
	}
	roundTrip(t, other)
	require.EqualValues(t, 2, agent.calls.Load(), "starts over the limit called the model")
	_, err = first.Cancel(ctx, busy.RunID)
	require.NoError(t, err)
}

// The actor keeps its runs' request ids as hashes. A new id whose hash it already has
// costs a read, then starts its run as any new id does.
func TestANewRequestIDWithAKnownHashStartsARun(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := &countingAgent{Agent: script.PerRun(func(conversation.Request) []script.Step {
		return []script.Step{script.Text("done")}
	})}
	ctx := testCtx(t)
	a := startActorWithClock(t, st, agent, clockwork.NewFakeClock())
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hi"})
	require.NoError(t, err)
	tab.Await(t, func(e *conversation.Event) bool { return e.Terminal() && e.RunID == first.RunID })

	a.KnowRequestHash("r2")
	second, err := a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "hi"})
	require.NoError(t, err)
	require.False(t, second.Duplicate)
	require.NotEqual(t, first.RunID, second.RunID)
	require.EqualValues(t, "chat.done", tab.Await(t, func(e *conversation.Event) bool { return e.Terminal() && e.RunID == second.RunID }).Type)
	require.EqualValues(t, 2, agent.calls.Load())

	again, err := a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "hi"})
	require.NoError(t, err)
	require.Equal(t, conversation.SendResult{RunID: second.RunID, Duplicate: true, Status: chat.RunDone}, again)
}

// holdStore holds each run start until the test lets it go, and says when one waits.
type holdStore struct {
	*store.Store
	starting chan struct{}
	release  chan struct{}
}

func (h *holdStore) RunStartCounted(ctx context.Context, run chat.Run, user chat.Message, maxActive int) (int, error) {
	h.starting <- struct{}{}
	<-h.release
	return h.Store.RunStartCounted(ctx, run, user, maxActive)
}

// A start the database surely takes calls the model while its row is on the way (the
// round trip is not added to the time to the first token); one it might refuse waits
// for the answer. Here the owner's first start waits (this process has not seen her
// count of active runs), and her next one, clearly under the limit, does not.
func TestAStartThatCannotBeRefusedCallsTheModelAtOnce(t *testing.T) {
	t.Parallel()
	hs := &holdStore{Store: storetest.New(t), starting: make(chan struct{}), release: make(chan struct{})}
	called := make(chan struct{}, 2)
	agent := conversation.AgentFunc(func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		called <- struct{}{}
		return out.Text("hi")
	})
	a := startActorWithClock(t, hs, agent, clockwork.NewFakeClock(), func(c *conversation.Config) {
		c.MaxRunsPerUser, c.RunCounts = 8, &conversation.RunCounts{}
	})
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "alice", Subscriber: tab})
	require.NoError(t, err)

	send := func(id string) chan error {
		errc := make(chan error, 1)
		go func() {
			_, err := a.Send(ctx, conversation.SendRequest{RequestID: id, Content: "hi"})
			errc <- err
		}()
		<-hs.starting
		return errc
	}
	errc := send("r1")
	select {
	case <-called:
		t.Fatal("the model was called before a start the database might refuse was stored")
	default:
	}
	hs.release <- struct{}{}
	require.NoError(t, <-errc)
	<-called
	tab.Await(t, convtest.Terminal)

	errc = send("r2")
	select {
	case <-called: // while the start is held
	case <-ctx.Done():
		t.Fatal("a start clearly under the limit waited for the database before the model")
	}
	hs.release <- struct{}{}
	require.NoError(t, <-errc)
}

// blockReads holds the next MessagesPath (a history read) until released.
type blockReads struct {
	*store.Store
	reading chan struct{}
	release chan struct{}
	hold    atomic.Bool
}

func (b *blockReads) MessagesPath(ctx context.Context, id uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error) {
	if b.hold.CompareAndSwap(true, false) {
		b.reading <- struct{}{}
		<-b.release
	}
	return b.Store.MessagesPath(ctx, id, leaf, before, limit)
}

// Unsubscribe is never lost, whatever the actor is doing: here the actor is busy in a
// statement (its inbox, of one, fills at the first leaver) and the leavers' contexts have
// ended; every unsubscribe takes effect all the same once the actor is free, and it goes
// idle.
func TestUnsubscribeIsNeverLost(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	st := &blockReads{Store: storetest.New(t), reading: make(chan struct{}), release: make(chan struct{})}
	a := startActorWithClock(t, st, script.New(script.Text("done")), clock, func(c *conversation.Config) {
		c.InboxSize = 1
	})
	ctx := testCtx(t)
	tabs := make([]*convtest.Recorder, 20)
	for i := range tabs {
		tabs[i] = convtest.New()
		_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tabs[i]})
		require.NoError(t, err)
	}
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	tabs[0].Await(t, convtest.Terminal)

	st.hold.Store(true)
	busy := make(chan error, 1)
	go func() { _, err := a.History(ctx, 0, 10); busy <- err }()
	<-st.reading // the actor waits for the database
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for _, tab := range tabs {
		a.Unsubscribe(gone, tab)
	}
	close(st.release)
	require.NoError(t, <-busy)
	waitTimers(t, clock, 1) // nobody subscribed, no run: the idle timer
	clock.Advance(conversation.DefaultIdleTimeout)
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the actor kept a subscriber that unsubscribed")
	}
}

// syncBuffer is a log that tests read while actors write to it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A stop whose budget ends before the database takes what the session queued logs each
// write it could not store, at error level, naming it: the next process continues the
// run from what was stored, and an operator can see what that was not.
func TestStopLogsWhatItCouldNotStore(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	var log syncBuffer
	a := conversation.Start(conversation.Config{Store: st, Agent: script.New(script.Text("done")),
		Logger: zerolog.New(&log).Level(zerolog.ErrorLevel)}, uuid.New(), nil)
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	st.set("RunUpdate", failBefore, -1) // the run's end never passes
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", tab.Await(t, convtest.Terminal).Type)

	budget, cancel := context.WithTimeout(ctx, 600*time.Millisecond)
	defer cancel()
	require.NoError(t, a.Stop(budget))
	<-budget.Done()
	require.NoError(t, a.Wait(ctx))
	require.Contains(t, log.String(), `"level":"error"`)
	require.Contains(t, log.String(), `"statement":"RunUpdate","run_id":"`+res.RunID.String()+`","status":"done","message":"stopping with a write the database did not take"`)
}

// At a stop, what the session queued is stored within the stop's budget: a write that
// fails and may pass is retried until the database takes it.
func TestStopStoresQueuedWritesWithinItsBudget(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	a := conversation.Start(conversation.Config{Store: st, Agent: script.New(script.Text("done")),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)}, uuid.New(), nil)
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	st.set("RunUpdate", failBefore, 3) // the run's end fails three times, then passes
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", tab.Await(t, convtest.Terminal).Type)

	require.NoError(t, a.Stop(ctx))
	require.NoError(t, a.Wait(ctx))
	run, err := st.Store.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status, "stored before the actor stopped")
}

// A subscriber whose hello failed (the database did not answer) and that was then
// unsubscribed, as a connection does after any failed hello, may say hello again and is
// caught up: the unsubscribe undoes the hellos sent before it, not those after.
func TestHelloAgainAfterAFailedOneIsCaughtUp(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	a := startActor(t, st, script.New())
	ctx := testCtx(t)
	tab := convtest.New()
	st.set("SessionOpen", failBefore, 1)
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	requireCode(t, err, conversation.CodeStorage)
	a.Unsubscribe(ctx, tab)
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	require.NotNil(t, tab.AwaitCatchUp(t, 1).Snapshot, "the second hello is answered")
}

// A hello refused for another user's session does not stop an actor that still holds a
// run (here one waiting for a decision, with nobody watching): the run keeps waiting
// in it, and the actor stops cleanly later.
func TestARefusedHelloLeavesAParkedRunAlone(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	a := startActorWithClock(t, st, script.New(script.AwaitOnly("c1", "t", `{}`, nil), script.Hang()), clock, func(c *conversation.Config) {
		c.SuspendOnStop = true
	})
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Owner: "alice", Subscriber: tab})
	require.NoError(t, err)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	tab.Await(t, func(f *conversation.Event) bool {
		return f.Type == conversation.EventRunStatus && f.Run.Status == chat.RunAwaitingApproval
	})
	a.Unsubscribe(ctx, tab)

	_, err = a.Hello(ctx, conversation.HelloRequest{Owner: "mallory", Subscriber: convtest.New()})
	require.ErrorIs(t, err, conversation.ErrNotYours)
	decided, err := a.Decide(ctx, res.RunID, "c1", true)
	require.NoError(t, err, "the same actor still holds the run")
	require.Equal(t, res.RunID, decided.RunID)
}

// A history read is the first thing an actor does for a session read over HTTP (no
// hello): like a hello, it takes up the session's run that no actor drives, here one a
// decision waits on, suspended when its last actor stopped. Otherwise the node would hold
// the session's lease with its run stalled until the actor was evicted.
func TestAHistoryReadTakesUpARunNoActorDrives(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	continued := make(chan bool, 1)
	agent := script.PerRun(func(req conversation.Request) []script.Step {
		if req.Checkpoint == nil {
			return []script.Step{script.AwaitOnly("c1", "t", `{}`, nil), script.Hang()}
		}
		continued <- true
		return []script.Step{script.Hang()}
	})
	// With leases, as a node runs it: the read is what acquires the session here.
	first := startNode(t, st, agent, clockwork.NewFakeClock(), "n1", uuid.New())
	tab := convtest.New()
	_, err := first.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	res, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	tab.Await(t, func(f *conversation.Event) bool {
		return f.Type == conversation.EventRunStatus && f.Run.Status == chat.RunAwaitingApproval
	})
	require.NoError(t, first.Stop(ctx))
	require.NoError(t, first.Wait(ctx))

	second := startNode(t, st, agent, clockwork.NewFakeClock(), "n2", first.SessionID())
	page, err := second.History(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, page.Messages, 2, "the message, and the call waiting for its decision")
	select {
	case <-continued:
	case <-ctx.Done():
		t.Fatal("the read did not take the run up")
	}
	decided, err := second.Decide(ctx, res.RunID, "c1", false)
	require.NoError(t, err)
	require.Equal(t, res.RunID, decided.RunID)
}
