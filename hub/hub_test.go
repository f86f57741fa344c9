package hub_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	owner       = "alice"
	idleTimeout = time.Minute
	// waitTimeout bounds every wait of a test; a test that waits longer has hung.
	waitTimeout = 20 * time.Second
)

// env is a hub on a fresh real database, driven by a fake clock.
type env struct {
	st    *store.Store
	clock *clockwork.FakeClock
	hub   *hub.Hub
}

func newEnv(t *testing.T, agent conversation.Agent, edit ...func(*conversation.Config)) *env {
	t.Helper()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	// Eviction and abandonment run as the services chatd starts, on the fake clock.
	evictions := conversation.NewDeadlines("eviction", clock)
	abandonments := conversation.NewDeadlines("abandonment", clock)
	cfg := conversation.Config{
		Store:        st,
		Agent:        agent,
		Clock:        clock,
		Logger:       log,
		IdleTimeout:  idleTimeout,
		Evictions:    evictions,
		Abandonments: abandonments,
	}
	for _, e := range edit {
		e(&cfg)
	}
	h, err := hub.New(cfg, log)
	require.NoError(t, err)
	require.NoError(t, evictions.Start(t.Context()))
	require.NoError(t, abandonments.Start(t.Context()))
	// Registered after storetest's cleanups, so it runs before the database goes away.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		require.NoError(t, abandonments.Stop(ctx))
		require.NoError(t, evictions.Stop(ctx))
	})
	return &env{st: st, clock: clock, hub: h}
}

// testCtx bounds a test's waits.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// timerArmed reports whether the fake clock has at least one pending timer right now. It
// never waits: a blocker on an already cancelled context returns at once.
func timerArmed(fc *clockwork.FakeClock) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return fc.BlockUntilContext(ctx, 1) == nil
}

// roundTrip makes the actor handle one intent, so everything queued before it (and the
// idle check that follows each intent) has been processed.
func roundTrip(ctx context.Context, t *testing.T, a *conversation.Actor) {
	t.Helper()
	_, err := a.History(ctx, 0, 1)
	require.NoError(t, err, "actor of session %s does not answer", a.SessionID())
}

func isDone(a *conversation.Actor) bool {
	select {
	case <-a.Done():
		return true
	default:
		return false
	}
}

func waitDone(ctx context.Context, t *testing.T, a *conversation.Actor) {
	t.Helper()
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatalf("actor %s (epoch %s) did not stop: %v", a.SessionID(), a.Epoch(), ctx.Err())
	}
	// Its run goroutines must be gone too: nobody else waits for an evicted actor.
	require.NoError(t, a.Wait(ctx))
}

// sub is a test Subscriber. It never blocks: frames go to a slice and a one-slot channel
// wakes whoever waits.
type sub struct {
	mu     sync.Mutex
	frames [][]byte
	drops  []conversation.DropReason
	dropAt []int // len(frames) when each drop happened
	signal chan struct{}
}

var _ conversation.Subscriber = (*sub)(nil)

func newSub() *sub { return &sub{signal: make(chan struct{}, 1)} }

func (s *sub) Deliver(ev *conversation.Event) bool {
	return s.add(ev.Encode(ws.Format))
}

func (s *sub) add(frame []byte) bool {
	s.mu.Lock()
	s.frames = append(s.frames, frame)
	s.mu.Unlock()
	s.poke()
	return true
}

func (s *sub) CatchUp(c conversation.CatchUp) bool {
	frames, err := ws.EncodeCatchUp(c)
	if err != nil {
		panic(err)
	}
	for _, f := range frames {
		s.add(f)
	}
	return true
}

func (s *sub) Dropped(reason conversation.DropReason) {
	s.mu.Lock()
	s.drops = append(s.drops, reason)
	s.dropAt = append(s.dropAt, len(s.frames))
	s.mu.Unlock()
	s.poke()
}

func (s *sub) poke() {
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

type received struct {
	frames []wstest.Frame
	drops  []conversation.DropReason
	dropAt []int
}

func (s *sub) received(t *testing.T) received {
	t.Helper()
	s.mu.Lock()
	raw := append([][]byte(nil), s.frames...)
	r := received{drops: append([]conversation.DropReason(nil), s.drops...), dropAt: append([]int(nil), s.dropAt...)}
	s.mu.Unlock()
	for _, b := range raw {
		f, err := wstest.Decode(b)
		require.NoError(t, err)
		r.frames = append(r.frames, f)
	}
	return r
}

// await waits until cond holds for what the subscriber has received, and returns it.
func (s *sub) await(ctx context.Context, t *testing.T, what string, cond func(received) bool) received {
	t.Helper()
	for {
		r := s.received(t)
		if cond(r) {
			return r
		}
		select {
		case <-s.signal:
		case <-ctx.Done():
			t.Fatalf("subscriber never got %s; it has %d frames: %s", what, len(r.frames), types(r.frames))
		}
	}
}

// awaitType waits for a frame of type typ and returns everything received so far.
func (s *sub) awaitType(ctx context.Context, t *testing.T, typ string) []wstest.Frame {
	t.Helper()
	return s.await(ctx, t, typ, func(r received) bool {
		for _, f := range r.frames {
			if f.Type == typ {
				return true
			}
		}
		return false
	}).frames
}

func types(fs []wstest.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprintf("%s#%d", f.Type, f.Seq)
	}
	return out
}

func applyAll(t *testing.T, st *wstest.State, fs []wstest.Frame) {
	t.Helper()
	for _, f := range fs {
		require.NoError(t, st.Apply(f), "frames: %v", types(fs))
	}
}

// storedView returns the session's newest n messages as the wire shows them.
func storedView(ctx context.Context, t *testing.T, st *store.Store, id uuid.UUID, n int) []wstest.Message {
	t.Helper()
	msgs, _, err := st.MessagesBefore(ctx, id, 0, n)
	require.NoError(t, err)
	view, err := wstest.FromStore(msgs)
	require.NoError(t, err)
	return view
}

func hello(s *sub) conversation.HelloRequest {
	return conversation.HelloRequest{Create: true, Owner: owner, Subscriber: s}
}

func TestHelloGetOrStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("ok")))
	ctx := testCtx(t)

	id1 := uuid.New()
	s1, s2 := newSub(), newSub()
	a1, r1, err := e.hub.Hello(ctx, id1, hello(s1))
	require.NoError(t, err)
	a1b, r2, err := e.hub.Hello(ctx, id1, hello(s2))
	require.NoError(t, err)
	require.Same(t, a1, a1b, "two hellos for one session must reach one actor")
	require.Equal(t, a1.Epoch(), a1b.Epoch())
	require.Equal(t, a1.Epoch(), r1.Epoch)
	require.Equal(t, a1.Epoch(), r2.Epoch)
	require.Equal(t, id1, a1.SessionID())
	require.Equal(t, 1, e.hub.Len())
	got, ok := e.hub.Lookup(id1)
	require.True(t, ok)
	require.Same(t, a1, got)
	for _, s := range []*sub{s1, s2} {
		fs := s.received(t).frames
		require.Len(t, fs, 1)
		require.Equal(t, "snapshot", fs[0].Type)
		require.Equal(t, a1.Epoch(), fs[0].Epoch)
	}

	id2 := uuid.New()
	a2, r3, err := e.hub.Hello(ctx, id2, hello(newSub()))
	require.NoError(t, err)
	require.NotSame(t, a1, a2)
	require.NotEqual(t, a1.Epoch(), a2.Epoch())
	require.Equal(t, a2.Epoch(), r3.Epoch)
	require.Equal(t, id2, a2.SessionID())
	require.Equal(t, 2, e.hub.Len())

	// Many hellos at once for a new session still meet one actor.
	id3 := uuid.New()
	const n = 16
	actors := make([]*conversation.Actor, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			actors[i], _, errs[i] = e.hub.Hello(ctx, id3, hello(newSub()))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Same(t, actors[0], actors[i], "hello %d met another actor", i)
	}
	require.Equal(t, 3, e.hub.Len())
	got, ok = e.hub.Lookup(id3)
	require.True(t, ok)
	require.Same(t, actors[0], got)
	for _, a := range []*conversation.Actor{a1, a2, actors[0]} {
		require.False(t, isDone(a))
	}
}

func TestIdleEviction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("hello ", "world")))
	ctx := testCtx(t)
	id := uuid.New()

	s1 := newSub()
	a1, res, err := e.hub.Hello(ctx, id, hello(s1))
	require.NoError(t, err)
	require.False(t, res.Resumed)
	sent, err := a1.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hi there"})
	require.NoError(t, err)
	fs := s1.awaitType(ctx, t, "chat.done")
	state := wstest.NewState()
	applyAll(t, state, fs)
	require.Equal(t, "snapshot", fs[0].Type)
	require.Equal(t, sent.RunID.String(), fs[len(fs)-1].RunID)
	before := state.Sorted()
	require.Len(t, before, 2)
	require.Equal(t, "hi there", before[0].Content)
	require.Equal(t, "hello world", before[1].Content)
	require.Equal(t, "complete", before[1].Status)

	// The only subscriber leaves and no run is active: the actor arms its idle timer.
	a1.Unsubscribe(ctx, s1)
	require.NoError(t, e.clock.BlockUntilContext(ctx, 1))

	// Short of IdleTimeout the timer has not expired, so nothing can have fired.
	e.clock.Advance(idleTimeout - time.Nanosecond)
	roundTrip(ctx, t, a1)
	require.True(t, timerArmed(e.clock), "the idle timer should still be pending")
	require.False(t, isDone(a1))
	require.Equal(t, 1, e.hub.Len())
	got, ok := e.hub.Lookup(id)
	require.True(t, ok)
	require.Same(t, a1, got)

	// Past it, the actor forgets itself in the hub and stops.
	e.clock.Advance(time.Second)
	waitDone(ctx, t, a1)
	require.Equal(t, 0, e.hub.Len())
	_, ok = e.hub.Lookup(id)
	require.False(t, ok)
	_, err = a1.History(ctx, 0, 1)
	require.ErrorIs(t, err, conversation.ErrStopped)

	// A client that kept the old epoch comes back: a new actor answers with a snapshot
	// that holds the earlier run.
	s2 := newSub()
	a2, res, err := e.hub.Hello(ctx, id, conversation.HelloRequest{Create: true,
		Owner: owner, Epoch: state.Epoch, LastSeq: state.LastSeq, Subscriber: s2,
	})
	require.NoError(t, err)
	require.NotSame(t, a1, a2)
	require.NotEqual(t, a1.Epoch(), a2.Epoch())
	require.Equal(t, a2.Epoch(), res.Epoch)
	require.False(t, res.Resumed)
	require.Equal(t, 1, e.hub.Len())
	got, ok = e.hub.Lookup(id)
	require.True(t, ok)
	require.Same(t, a2, got)

	fs2 := s2.received(t).frames
	require.Len(t, fs2, 1, "frames: %v", types(fs2))
	snap := fs2[0]
	require.Equal(t, "snapshot", snap.Type)
	require.Equal(t, id.String(), snap.SessionID)
	require.Equal(t, a2.Epoch(), snap.Epoch)
	require.Equal(t, int64(0), snap.LastSeq)
	require.Nil(t, snap.ActiveRun)
	fresh := wstest.NewState()
	applyAll(t, fresh, fs2)
	require.Empty(t, wstest.Diff(before, fresh.Sorted()), "snapshot after eviction")
	require.Empty(t, wstest.Diff(storedView(ctx, t, e.st, id, 10), fresh.Sorted()), "snapshot vs database")
}

func TestNoEvictionWhileBusy(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	// Abandonment (a run with nobody watching) is far beyond this test's clock moves.
	e := newEnv(t, script.New(gate.Wait(), script.Text("finally")), func(c *conversation.Config) {
		c.AbandonAfter = 1000 * idleTimeout
	})
	ctx := testCtx(t)
	id := uuid.New()

	// A subscriber keeps the actor however far the clock goes.
	s := newSub()
	a, _, err := e.hub.Hello(ctx, id, hello(s))
	require.NoError(t, err)
	roundTrip(ctx, t, a)
	require.False(t, timerArmed(e.clock), "an actor with a subscriber armed its idle timer")
	for range 3 {
		e.clock.Advance(100 * idleTimeout)
		roundTrip(ctx, t, a)
		require.False(t, isDone(a))
		require.Equal(t, 1, e.hub.Len())
	}

	// An active run keeps it too, with nobody subscribed.
	sent, err := a.Send(ctx, conversation.SendRequest{RequestID: "busy", Content: "take your time"})
	require.NoError(t, err)
	s.awaitType(ctx, t, "chat.started")
	a.Unsubscribe(ctx, s)
	roundTrip(ctx, t, a)
	// (The abandonment timer is armed now; the idle timer is not, as the clock shows.)
	for range 3 {
		e.clock.Advance(100 * idleTimeout)
		roundTrip(ctx, t, a)
		require.False(t, isDone(a))
		require.Equal(t, 1, e.hub.Len())
		got, ok := e.hub.Lookup(id)
		require.True(t, ok)
		require.Same(t, a, got)
	}
	run, err := e.st.RunGet(ctx, sent.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status)

	// The run ends: now the actor is idle, and goes IdleTimeout later. A subscriber
	// watches the end (and disarms the abandonment timer while it is there).
	watch := newSub()
	_, _, err = e.hub.Hello(ctx, id, hello(watch))
	require.NoError(t, err)
	require.NoError(t, gate.Pass(ctx))
	watch.awaitType(ctx, t, "chat.done")
	a.Unsubscribe(ctx, watch)
	require.NoError(t, e.clock.BlockUntilContext(ctx, 1))
	run, err = e.st.RunGet(ctx, sent.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)

	e.clock.Advance(idleTimeout - time.Nanosecond)
	roundTrip(ctx, t, a)
	require.False(t, isDone(a))
	require.Equal(t, 1, e.hub.Len())
	require.True(t, timerArmed(e.clock))

	e.clock.Advance(time.Nanosecond)
	waitDone(ctx, t, a)
	require.Equal(t, 0, e.hub.Len())
	// The unsubscribed subscriber heard nothing after it left, and was never dropped.
	r := s.received(t)
	require.Empty(t, r.drops)
	for _, f := range r.frames {
		require.NotEqual(t, "chat.done", f.Type, "an unsubscribed subscriber got %s", f.Type)
	}
}

// TestEvictionRacesHello lets idle eviction and a new hello for the same session meet,
// over and over. Whichever wins, the hello must succeed on the one live actor, the
// subscriber must be caught up exactly once, and the session must go on working.
func TestEvictionRacesHello(t *testing.T) {
	t.Parallel()
	const iterations = 200
	e := newEnv(t, script.New(script.Text("a", "b")), func(c *conversation.Config) {
		c.SnapshotMessages = 20 // keep snapshots, and so the test, small
	})
	ctx := testCtx(t)
	id := uuid.New()

	// runOnce sends a message through a and waits for its end on s, folding the events
	// into state; it checks the client's view against the database.
	runOnce := func(i int, a *conversation.Actor, s *sub, state *wstest.State) {
		t.Helper()
		reqID := fmt.Sprintf("r%d", i)
		sent, err := a.Send(ctx, conversation.SendRequest{RequestID: reqID, Content: "message " + reqID})
		require.NoError(t, err, "iteration %d", i)
		require.False(t, sent.Duplicate)
		fs := s.awaitType(ctx, t, "chat.done")
		require.Equal(t, 1, countCatchUp(fs), "iteration %d: frames %v", i, types(fs))
		applyAll(t, state, fs[1:])
		require.Equal(t, sent.RunID.String(), fs[len(fs)-1].RunID)
		require.Nil(t, state.ActiveRun)

		var maxPos int64
		require.NoError(t, e.st.Pool().QueryRow(ctx, "SELECT max(position) FROM messages WHERE session_id = $1", id).Scan(&maxPos))
		require.Equal(t, int64(2*(i+1)), maxPos, "iteration %d: messages lost or duplicated", i)
		view := state.Sorted()
		require.Empty(t, wstest.Diff(storedView(ctx, t, e.st, id, len(view)), view), "iteration %d", i)
		last := view[len(view)-1]
		require.Equal(t, "ab", last.Content)
		require.Equal(t, "complete", last.Status)
		require.Equal(t, "message "+reqID, view[len(view)-2].Content)
	}

	s := newSub()
	cur, _, err := e.hub.Hello(ctx, id, hello(s))
	require.NoError(t, err)
	state := wstest.NewState()
	applyAll(t, state, s.received(t).frames)
	runOnce(0, cur, s, state)

	evicted := 0
	for i := 1; i <= iterations; i++ {
		// Each round's waits have their own bound (runOnce's too): all 200 rounds under
		// -race on a loaded machine can take longer than one wait may.
		ctx = testCtx(t)
		// Make the actor idle and wait for its eviction timer.
		cur.Unsubscribe(ctx, s)
		require.NoError(t, e.clock.BlockUntilContext(ctx, 1))

		next := newSub()
		var (
			got    *conversation.Actor
			res    conversation.HelloResult
			errH   error
			wg     sync.WaitGroup
			start  = make(chan struct{})
			epoch  = state.Epoch
			seq    = state.LastSeq
			maxLen int
			lenMu  sync.Mutex
		)
		sample := func() {
			n := e.hub.Len()
			lenMu.Lock()
			maxLen = max(maxLen, n)
			lenMu.Unlock()
		}
		wg.Go(func() {
			<-start
			sample()
			e.clock.Advance(idleTimeout + time.Second)
			sample()
		})
		wg.Go(func() {
			<-start
			sample()
			got, res, errH = e.hub.Hello(ctx, id, conversation.HelloRequest{Create: true,
				Owner: owner, Epoch: epoch, LastSeq: seq, Subscriber: next,
			})
			sample()
		})
		close(start)
		wg.Wait()

		require.NoError(t, errH, "iteration %d", i)
		require.NotNil(t, got)
		require.LessOrEqual(t, maxLen, 1, "iteration %d", i)
		require.LessOrEqual(t, e.hub.Len(), 1, "iteration %d", i)

		// Exactly one catch-up frame, first, and nothing else yet.
		fs := next.received(t).frames
		require.Len(t, fs, 1, "iteration %d: frames %v", i, types(fs))
		if got == cur {
			require.True(t, res.Resumed, "iteration %d", i)
			require.Equal(t, "resumed", fs[0].Type, "iteration %d", i)
			require.Equal(t, epoch, fs[0].Epoch)
		} else {
			evicted++
			// The hub only moves on once the old actor has stopped.
			require.True(t, isDone(cur), "iteration %d: the old actor is still live next to a new one", i)
			require.NoError(t, cur.Wait(ctx))
			require.False(t, res.Resumed, "iteration %d", i)
			require.Equal(t, "snapshot", fs[0].Type, "iteration %d", i)
			require.NotEqual(t, epoch, fs[0].Epoch)
		}
		require.Equal(t, got.Epoch(), fs[0].Epoch)
		require.Equal(t, got.Epoch(), res.Epoch)
		applyAll(t, state, fs)

		look, ok := e.hub.Lookup(id)
		require.True(t, ok, "iteration %d: hello succeeded but the hub holds no actor", i)
		require.Same(t, got, look, "iteration %d: hello returned an actor the hub does not hold", i)

		// The session still works, through the actor hello returned, to its subscriber.
		runOnce(i, got, next, state)

		// Settled: still the one actor, live, and the subscriber was never dropped.
		look, ok = e.hub.Lookup(id)
		require.True(t, ok)
		require.Same(t, got, look, "iteration %d", i)
		require.False(t, isDone(got), "iteration %d: the actor with a subscriber stopped", i)
		require.Equal(t, 1, e.hub.Len())
		require.Empty(t, next.received(t).drops, "iteration %d", i)

		cur, s = got, next
	}
	t.Logf("%d of %d hellos met an evicted actor", evicted, iterations)
}

func countCatchUp(fs []wstest.Frame) int {
	n := 0
	for i, f := range fs {
		if f.Type == "snapshot" || f.Type == "resumed" {
			if i != 0 {
				return -1 // a catch-up frame after events
			}
			n++
		}
	}
	return n
}

func TestShutdownInterruptsRuns(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	steps := script.New(script.Text("partial"), gate.Wait(), script.Text(" rest"))
	// The agent reports when its run was cancelled and then holds on until released, so
	// the test can see that Shutdown waits for it.
	var running atomic.Int32 // agents that have not returned
	cancelled, release := make(chan struct{}), make(chan struct{})
	agent := conversation.AgentFunc(func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		running.Add(1)
		defer running.Add(-1)
		err := steps.Run(ctx, req, out)
		close(cancelled) // this test starts one run
		<-release
		return err
	})
	e := newEnv(t, agent)
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the hub's Shutdown
	ctx := testCtx(t)
	id := uuid.New()

	s := newSub()
	a, _, err := e.hub.Hello(ctx, id, hello(s))
	require.NoError(t, err)
	sent, err := a.Send(ctx, conversation.SendRequest{RequestID: "long", Content: "a long task"})
	require.NoError(t, err)
	// The delta has been published; the agent goes on to the gate, which never opens.
	s.awaitType(ctx, t, "chat.delta")

	shutdown := make(chan error, 1)
	go func() { shutdown <- e.hub.Shutdown(ctx) }()
	select {
	case <-cancelled:
	case <-ctx.Done():
		t.Fatal("Shutdown did not cancel the run's agent")
	}
	s.await(ctx, t, "a drop", func(r received) bool { return len(r.drops) > 0 })
	select { // the actor stops even while its agent has not returned
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the actor did not stop")
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned (%v) while the run's agent was still running", err)
	default:
	}
	releaseOnce.Do(func() { close(release) })
	select {
	case err := <-shutdown:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Shutdown did not return once the agent had")
	}
	require.True(t, isDone(a), "Shutdown returned before the actor stopped")
	require.Zero(t, running.Load(), "Shutdown returned before the run's agent did")
	require.Equal(t, 0, e.hub.Len())

	r := s.received(t)
	require.Equal(t, []conversation.DropReason{conversation.DropShutdown}, r.drops)
	require.Equal(t, len(r.frames), r.dropAt[0], "frames came after the drop: %v", types(r.frames))
	state := wstest.NewState()
	applyAll(t, state, r.frames)
	last := r.frames[len(r.frames)-1]
	require.Equal(t, "chat.error", last.Type, "frames: %v", types(r.frames))
	require.Equal(t, sent.RunID.String(), last.RunID)
	require.NotNil(t, last.Run)
	require.Equal(t, "interrupted", last.Run.Status)
	require.NotNil(t, last.Run.Error)
	require.Equal(t, conversation.CodeInterrupted, last.Run.Error.Code)
	require.NotNil(t, last.Run.EndedAt)
	msgs := state.Sorted()
	require.Len(t, msgs, 2)
	require.Equal(t, "partial", msgs[1].Content)
	require.Equal(t, "interrupted", msgs[1].Status)

	run, err := e.st.RunGet(ctx, sent.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunInterrupted, run.Status)
	require.NotNil(t, run.EndedAt)
	require.NotNil(t, run.Error)
	require.Equal(t, conversation.CodeInterrupted, run.Error.Code)
	require.Equal(t, chat.CancelShutdown, run.CancelReason, "the shutdown is stored as the reason")
	require.Equal(t, "shutdown", last.Run.CancelReason)
	byReq, err := e.st.RunByRequest(ctx, id, "long")
	require.NoError(t, err)
	require.Equal(t, sent.RunID, byReq.ID)
	require.Equal(t, chat.RunInterrupted, byReq.Status)
	require.Empty(t, wstest.Diff(storedView(ctx, t, e.st, id, 10), msgs), "client vs database")

	_, _, err = e.hub.Hello(ctx, id, hello(newSub()))
	require.ErrorIs(t, err, hub.ErrClosed)
	_, _, err = e.hub.Hello(ctx, uuid.New(), hello(newSub()))
	require.True(t, errors.Is(err, hub.ErrClosed), "hello for a new session after shutdown: %v", err)
	require.Equal(t, 0, e.hub.Len())
	require.NoError(t, e.hub.Shutdown(ctx), "a second shutdown")
}

// A hello whose context ends while the actor handles it may still subscribe. Hello then
// returns the actor with the error, so the caller can unsubscribe, and the actor is left
// with no subscriber that nobody reads (it turns idle and arms its eviction timer).
func TestCancelledHelloCanBeUndone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, script.New(script.Text("x")))
	id := uuid.New()
	ctx := testCtx(t)
	keeper := newSub()
	a, _, err := e.hub.Hello(ctx, id, hello(keeper)) // creates the session
	require.NoError(t, err)

	var subs []*sub
	for range 50 {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		s := newSub()
		got, _, err := e.hub.Hello(cctx, id, hello(s))
		require.Same(t, a, got, "Hello returns the actor it reached, error or not")
		if err != nil { // nil: the answer was there before the caller looked at its context
			require.ErrorIs(t, err, context.Canceled)
		}
		got.Unsubscribe(ctx, s)
		subs = append(subs, s)
	}
	roundTrip(ctx, t, a) // everything queued before has been handled
	subscribed := 0
	for _, s := range subs {
		if len(s.received(t).frames) > 0 {
			subscribed++ // the hello got through although its caller had given up
		}
	}
	// Either way is undone: a hello handled before its unsubscribe is let go by it, and
	// one handled after subscribes nothing.
	t.Logf("%d of 50 cancelled hellos had subscribed before their unsubscribe", subscribed)

	// Once the keeper leaves too, nothing holds the actor: it arms its eviction timer.
	a.Unsubscribe(ctx, keeper)
	require.NoError(t, e.clock.BlockUntilContext(ctx, 1))
	e.clock.Advance(idleTimeout)
	waitDone(ctx, t, a)
}

// approvalAgent asks for approval of call c1 (or, continued, waits for the decision its
// checkpoint holds) and then runs it, as chatd's agent loop does.
type approvalAgent struct{}

func (approvalAgent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	var ch <-chan conversation.Decision
	var err error
	if len(req.Checkpoint) > 0 {
		ch, err = out.AwaitDecision("c1")
	} else {
		ch, err = out.AwaitApproval(conversation.ToolCall{ID: "c1", Name: "deploy", Input: []byte(`{}`)})
	}
	if err != nil {
		return err
	}
	select {
	case d := <-ch:
		if d.Approved {
			if err := out.ToolEnd("c1", conversation.ToolResult{Output: "deployed"}); err != nil {
				return err
			}
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	return out.Text("done")
}

// A run that waits for a person needs no actor: with nobody watching, its actor is
// evicted like any idle one (chatd_actors_live drops to 0) and the run waits in the
// database; a later tab sees the pending approval, and its decision completes the run.
func TestApprovalWaitLetsTheActorGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, approvalAgent{}, func(c *conversation.Config) { c.SuspendOnStop = true })
	h := e.hub
	ctx := testCtx(t)
	id := uuid.New()
	s1 := newSub()
	a1, _, err := h.Hello(ctx, id, hello(s1))
	require.NoError(t, err)
	sent, err := a1.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "deploy it"})
	require.NoError(t, err)
	s1.awaitType(ctx, t, "run.status")

	a1.Unsubscribe(ctx, s1)
	require.NoError(t, e.clock.BlockUntilContext(ctx, 1)) // the idle deadline, though a run waits
	e.clock.Advance(idleTimeout)
	waitDone(ctx, t, a1)
	require.Equal(t, 0, h.Len(), "no actor: chatd_actors_live is the hub's size")
	run, err := e.st.RunGet(ctx, sent.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunAwaitingApproval, run.Status, "it still waits, in the database")

	s2 := newSub()
	a2, res, err := h.Hello(ctx, id, hello(s2))
	require.NoError(t, err)
	require.False(t, res.Resumed)
	snap := s2.awaitType(ctx, t, "snapshot")[0]
	require.NotNil(t, snap.ActiveRun)
	require.Equal(t, "awaiting_approval", snap.ActiveRun.Status)
	require.Equal(t, "c1", snap.ActiveRun.PendingApproval.ToolCallID)

	dec, err := a2.Decide(ctx, sent.RunID, "c1", true)
	require.NoError(t, err)
	require.Equal(t, sent.RunID, dec.RunID)
	s2.awaitType(ctx, t, "chat.done")
	msgs, _, err := e.st.MessagesBefore(ctx, id, 0, 10)
	require.NoError(t, err)
	require.Len(t, msgs, 3, "user, the call, the answer")
	require.Equal(t, chat.ToolOK, msgs[1].Tool.Status)
	require.Equal(t, "deployed", *msgs[1].Tool.Output)
	require.Equal(t, "done", msgs[2].Content)
}
