package journal_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/journal"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// logStore is the real store, failing the stream log's next intervals when told to.
type logStore struct {
	*store.Store
	mu   sync.Mutex
	fail int
}

func (l *logStore) StreamLogSync(ctx context.Context, chunks []store.StreamChunk, done []uuid.UUID) error {
	l.mu.Lock()
	fail := l.fail > 0
	if fail {
		l.fail--
	}
	l.mu.Unlock()
	if fail {
		return errors.New("injected: the database is unavailable")
	}
	return l.Store.StreamLogSync(ctx, chunks, done)
}

type env struct {
	t      *testing.T
	st     *logStore
	synced chan error // each interval's outcome, once the writer counted it
	clock  *clockwork.FakeClock
	w      *journal.Writer
	reg    *prometheus.Registry
}

const interval = 50 * time.Millisecond

func newEnv(t *testing.T) *env {
	t.Helper()
	st := &logStore{Store: storetest.New(t)}
	reg := prometheus.NewRegistry()
	e := &env{t: t, st: st, synced: make(chan error, 16), clock: clockwork.NewFakeClock(), reg: reg}
	e.w = journal.NewWriter(journal.Config{
		Clock: e.clock, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Metrics: journal.NewMetrics(reg), StreamSync: interval, Log: st,
	})
	e.w.OnSync(func(err error) { e.synced <- err })
	require.NoError(t, e.w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, e.w.Stop(context.Background())) })
	return e
}

// session makes a session with its lease held by node a, and returns it with the
// lease's token.
func (e *env) session() (uuid.UUID, int64) {
	e.t.Helper()
	ctx := e.t.Context()
	s, err := e.st.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "u", CreatedAt: time.Now()})
	require.NoError(e.t, err)
	_, l, err := e.st.LeaseAcquire(ctx, s.ID, "a", "a:1", time.Minute)
	require.NoError(e.t, err)
	return s.ID, l.Token
}

// interval waits for the stream log's next statement and returns its outcome, letting
// an interval pass on the clock if the log waits for one (after a pause it stores at
// once).
func (e *env) interval() error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 10*time.Second)
	defer cancel()
	waiting := make(chan error, 1)
	wctx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() { waiting <- e.clock.BlockUntilContext(wctx, 2) }() // its timer, and the collection's ticker
	select {
	case err := <-e.synced:
		return err
	case err := <-waiting:
		require.NoError(e.t, err, "the stream log neither stored nor waited for an interval")
	}
	e.clock.Advance(interval)
	select {
	case err := <-e.synced:
		return err
	case <-ctx.Done():
		e.t.Fatal("no interval of the stream log was stored")
		return nil
	}
}

// running starts a run in session s under fence, and returns it.
func (e *env) running(s uuid.UUID, fence int64) chat.Run {
	e.t.Helper()
	run := chat.Run{ID: uuid.New(), SessionID: s, RequestID: "r1", Status: chat.RunRunning, StartedAt: time.Now(), LastActivityAt: time.Now()}
	user := chat.Message{ID: uuid.New(), SessionID: s, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "hi", Status: chat.MessageComplete, CreatedAt: time.Now()}
	require.NoError(e.t, e.st.RunStart(store.WithFence(e.t.Context(), fence), run, user, 0))
	return run
}

func (e *env) logged(ids ...uuid.UUID) map[uuid.UUID]string {
	e.t.Helper()
	texts, err := e.st.StreamLogRead(e.t.Context(), ids)
	require.NoError(e.t, err)
	return texts
}

// The text of every stream of the node goes in one statement per interval, as chunks
// that follow each other; a stream whose final text is stored has its log removed at the
// next interval; a stream that never had a chunk costs nothing.
func TestStreamLogStoresEachIntervalInOneStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s1, f1 := e.session()
	s2, f2 := e.session()
	// The first text of a quiet node is stored at once, which could split the text below
	// at any point: an interval of other text first sets the pace, so that what follows
	// waits for the clock.
	e.w.Stream(s1, uuid.New(), f1).Append(".")
	require.NoError(t, e.interval())
	require.EqualValues(t, 1, value(t, e.reg, "chatd_stream_log_statements_total"))

	m1, m2, m3 := uuid.New(), uuid.New(), uuid.New()
	a, b := e.w.Stream(s1, m1, f1), e.w.Stream(s2, m2, f2)
	a.Append("Hello")
	a.Append(", ")
	b.Append("Bonjour")
	require.NoError(t, e.interval())
	require.Equal(t, map[uuid.UUID]string{m1: "Hello, ", m2: "Bonjour"}, e.logged(m1, m2))
	require.EqualValues(t, 2, value(t, e.reg, "chatd_stream_log_statements_total"))

	a.Append("world")
	require.NoError(t, e.interval())
	require.Equal(t, map[uuid.UUID]string{m1: "Hello, world", m2: "Bonjour"}, e.logged(m1, m2))
	require.EqualValues(t, 3, value(t, e.reg, "chatd_stream_log_statements_total"))
	require.EqualValues(t, len(".Hello, Bonjourworld"), value(t, e.reg, "chatd_stream_log_bytes_total"))

	a.Stored()
	a.Append("ignored") // after its final text: nothing more is logged
	require.NoError(t, e.interval())
	require.Equal(t, map[uuid.UUID]string{m2: "Bonjour"}, e.logged(m1, m2), "its log goes")

	short := e.w.Stream(s1, m3, f1)
	short.Append("never logged")
	short.Stored() // stored before any interval: no chunk, and no statement to remove one
	select {
	case err := <-e.synced:
		t.Fatalf("an interval with nothing to do made a statement (%v)", err)
	default:
	}
	require.Empty(t, e.logged(m3))
}

// A chunk whose fence is no longer its session's lease token (another node took the
// session over) is left out; the others of its statement are stored.
func TestStreamLogIsFenced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kept, f1 := e.session()
	taken, f2 := e.session()
	storetest.ExpireLease(t, e.st.Store, taken)
	_, l, err := e.st.LeaseAcquire(t.Context(), taken, "b", "b:1", time.Minute)
	require.NoError(t, err)
	require.Greater(t, l.Token, f2)
	m1, m2 := uuid.New(), uuid.New()
	e.w.Stream(kept, m1, f1).Append("mine")
	e.w.Stream(taken, m2, f2).Append("too late")
	require.NoError(t, e.interval())
	require.Equal(t, map[uuid.UUID]string{m1: "mine"}, e.logged(m1, m2))
}

// An interval the database does not take is kept and tried again at the next, with
// what came since: the chunks still follow each other, and a removal waits too.
func TestStreamLogFailureIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, f := e.session()
	m, gone := uuid.New(), uuid.New()
	g := e.w.Stream(s, gone, f)
	g.Append("to go")
	require.NoError(t, e.interval())
	g.Stored()

	e.st.mu.Lock()
	e.st.fail = 2
	e.st.mu.Unlock()
	st := e.w.Stream(s, m, f)
	st.Append("one ")
	require.Error(t, e.interval())
	st.Append("two ")
	require.Error(t, e.interval())
	st.Append("three")
	require.NoError(t, e.interval())
	require.Equal(t, map[uuid.UUID]string{m: "one two three"}, e.logged(m, gone))
	require.EqualValues(t, 2, value(t, e.reg, "chatd_stream_log_failures_total"))
}

// The text a stream logged is what a reader gets back, whatever pieces it came in.
func TestStreamLogKeepsLongTextWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, f := e.session()
	m := uuid.New()
	st := e.w.Stream(s, m, f)
	var want strings.Builder
	for i := range 20 {
		for j := range 50 {
			piece := string(rune('a'+(i+j)%26)) + "é "
			st.Append(piece)
			want.WriteString(piece)
		}
		require.NoError(t, e.interval())
	}
	require.Equal(t, want.String(), e.logged(m)[m])
}

// value is the value of the counter name (without labels), 0 when it has none.
func value(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// failStore fails every write while failing is set, as a database that is down.
type failStore struct {
	journal.Store
	mu      sync.Mutex
	failing bool
	calls   int
}

func (f *failStore) set(failing bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = failing
}

func (f *failStore) RunUpdate(ctx context.Context, r chat.Run, from ...chat.RunStatus) error {
	f.mu.Lock()
	failing := f.failing
	f.calls++
	f.mu.Unlock()
	if failing {
		return errors.New("injected: connection refused")
	}
	return f.Store.RunUpdate(ctx, r, from...)
}

// A queue whose write failed in a way that may pass waits for its retry (the writes
// behind it too), and is retried at once when the node's database answers again
// (Kick), not after its backoff; its depth and age show meanwhile.
func TestHaltedQueuesAreRetriedWhenTheDatabaseAnswers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, fence := e.session()
	run := e.running(s, fence)

	fs := &failStore{Store: e.st.Store, failing: true}
	q := e.w.Open(journal.QueueConfig{Session: s, Store: fs, Leased: true})
	require.ErrorIs(t, q.Add(journal.Write{Run: &run}), journal.ErrNoFence, "a leased session's write needs its fence")
	q.SetFence(fence)
	ended := run
	ended.Status = chat.RunDone
	require.NoError(t, q.Add(journal.Write{Run: &ended}))
	require.False(t, q.Await(), "it waits for a retry")
	require.True(t, q.Halted())
	require.EqualValues(t, 1, gauge(t, e.reg, "chatd_journal_queued_writes"))
	e.clock.Advance(3 * time.Second)
	require.InDelta(t, 3, gauge(t, e.reg, "chatd_journal_oldest_write_seconds"), 0.001)

	fs.set(false)
	e.w.Kick() // the database answers again
	require.True(t, q.Await())
	got, err := e.st.RunGet(t.Context(), run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, got.Status)
	require.Zero(t, gauge(t, e.reg, "chatd_journal_queued_writes"))
	require.Zero(t, gauge(t, e.reg, "chatd_journal_oldest_write_seconds"))
	require.Positive(t, value(t, e.reg, "chatd_journal_write_failures_total"))
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// fencedStore refuses every write for its fence, as the database does once another node
// took the session over, once open is closed.
type fencedStore struct {
	journal.Store
	open chan struct{}
}

func (f fencedStore) RunUpdate(ctx context.Context, _ chat.Run, _ ...chat.RunStatus) error {
	select {
	case <-f.open:
		return store.ErrFenced
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A queue fenced out (another node holds its session) writes nothing more and, once its
// actor stops (Halt), leaves nothing behind: no queued write in the gauges, and no queue
// for the node to retry when its database answers.
func TestAFencedOutQueueLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, fence := e.session()
	db := fencedStore{Store: e.st.Store, open: make(chan struct{})}
	q := e.w.Open(journal.QueueConfig{Session: s, Store: db, Leased: true})
	q.SetFence(fence)
	run := chat.Run{ID: uuid.New(), SessionID: s, Status: chat.RunDone}
	require.NoError(t, q.Add(journal.Write{Run: &run}))
	require.NoError(t, q.Add(journal.Write{Run: &run})) // queued behind the first
	close(db.open)
	require.False(t, q.Await())
	require.True(t, q.FencedOut())
	require.ErrorIs(t, q.Add(journal.Write{Run: &run}), journal.ErrFencedOut)
	q.Halt()
	require.Zero(t, e.w.HaltedQueues(), "a fenced-out queue is not retried")
	require.Zero(t, gauge(t, e.reg, "chatd_journal_queued_writes"))
	require.EqualValues(t, 1, value(t, e.reg, "chatd_fenced_writes_total"))
}

// A queue calls Notify after each signal, from the goroutine that sent it, with the
// signal already there to take: an actor whose loop gave its goroutine back while it had
// nothing to do learns from it that it has.
func TestQueueNotifiesAfterItSignals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, fence := e.session()
	run := e.running(s, fence)

	var q *journal.Queue
	signalled := make(chan bool, 16) // whether the signal was there when Notify was called
	q = e.w.Open(journal.QueueConfig{Session: s, Store: e.st.Store, Leased: true, Notify: func() {
		select {
		case <-q.Signal():
			signalled <- true
		default:
			signalled <- false
		}
	}})
	q.SetFence(fence)
	ended := run
	ended.Status = chat.RunDone
	require.NoError(t, q.Add(journal.Write{Run: &ended}))
	select {
	case ok := <-signalled:
		require.True(t, ok, "Notify is called after the signal is sent")
	case <-time.After(10 * time.Second):
		t.Fatal("Notify was not called for the write's outcome")
	}
	require.True(t, q.Await())
	got, err := e.st.RunGet(t.Context(), run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, got.Status)
}
