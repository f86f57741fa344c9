package lease_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/lease"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ttl = 9 * time.Second

// holder is a node's hub as the services see it: the leases its actors hold, and what
// the services told it.
type holder struct {
	mu      sync.Mutex
	held    map[uuid.UUID]int64
	lost    map[uuid.UUID]int64
	rescued []uuid.UUID
	// rescue acquires like an actor would.
	rescue func(id uuid.UUID) error
}

func (h *holder) Held() map[uuid.UUID]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uuid.UUID]int64, len(h.held))
	for k, v := range h.held {
		out[k] = v
	}
	return out
}

func (h *holder) Lost(_ context.Context, lost map[uuid.UUID]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost == nil {
		h.lost = map[uuid.UUID]int64{}
	}
	for id, t := range lost {
		h.lost[id] = t
	}
}

func (h *holder) Rescue(_ context.Context, id uuid.UUID) error {
	err := h.rescue(id)
	if err == nil {
		h.mu.Lock()
		h.rescued = append(h.rescued, id)
		h.mu.Unlock()
	}
	return err
}

func newSession(t *testing.T, st *store.Store, now time.Time) uuid.UUID {
	t.Helper()
	s, err := st.SessionCreate(t.Context(), chat.Session{ID: uuid.New(), Owner: "u", CreatedAt: now})
	require.NoError(t, err)
	return s.ID
}

func acquire(t *testing.T, st *store.Store, id uuid.UUID, node string) int64 {
	t.Helper()
	_, l, err := st.LeaseAcquire(t.Context(), id, node, node+":1", ttl)
	require.NoError(t, err)
	require.Equal(t, node, l.Node)
	return l.Token
}

func leaseOf(t *testing.T, st *store.Store, id uuid.UUID) store.Lease {
	t.Helper()
	l, err := st.LeaseGet(t.Context(), id)
	require.NoError(t, err)
	return l
}

// A renewal keeps what the node holds alive, also a lease that expired but that no
// other node took, and tells the node of the leases another node took over meanwhile;
// Stop gives the rest back.
func TestRenewerKeepsLeasesAndFindsThoseTaken(t *testing.T) {
	st := storetest.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	kept, taken := newSession(t, st, clock.Now()), newSession(t, st, clock.Now())
	h := &holder{held: map[uuid.UUID]int64{
		kept:  acquire(t, st, kept, "a"),
		taken: acquire(t, st, taken, "a"),
	}}
	r := lease.NewRenewer(lease.Config{Store: st, Holder: h, Node: func() string { return "a" }, TTL: ttl, Clock: clock, Logger: zerolog.Nop()})

	before := leaseOf(t, st, kept)
	require.True(t, r.Renew(t.Context()))
	require.Empty(t, h.lost)
	require.False(t, leaseOf(t, st, kept).ExpiresAt.Before(before.ExpiresAt), "renewed from the database's now")

	// a paused past its TTL: both leases expired, by the database's clock, and b took
	// one of them. a's renewal keeps the other, and names the one it lost.
	storetest.ExpireLease(t, st, kept)
	storetest.ExpireLease(t, st, taken)
	acquire(t, st, taken, "b")
	require.True(t, r.Renew(t.Context()))
	require.Equal(t, map[uuid.UUID]int64{taken: h.held[taken]}, h.lost, "with the token it was held with")
	l := leaseOf(t, st, kept)
	require.Equal(t, "a", l.Node)
	require.True(t, l.Live, "renewed although it had expired: nobody took it")

	// A lease that names the node but that no actor holds (its actor stopped as moved,
	// or its release failed) is not renewed: it expires, and another node may take it.
	orphan := newSession(t, st, clock.Now())
	acquire(t, st, orphan, "a")
	was := leaseOf(t, st, orphan)
	h.held = map[uuid.UUID]int64{}
	require.True(t, r.Renew(t.Context()))
	require.Equal(t, was, leaseOf(t, st, orphan), "not renewed")
	storetest.ExpireLease(t, st, orphan)
	acquire(t, st, orphan, "b")
	require.NoError(t, r.Start(t.Context()))
	require.NoError(t, r.Stop(t.Context()))
}

// down is the store as a node cut off from the database sees it: while set, every
// renewal fails. It records when (on the renewer's clock) each renewal was tried.
type down struct {
	*store.Store
	clock clockwork.Clock
	mu    sync.Mutex
	fail  bool
	tries chan time.Time
}

func (d *down) set(fail bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail = fail
}

func (d *down) LeaseRenew(ctx context.Context, node string, held map[uuid.UUID]int64, ttl time.Duration) ([]store.HeldLease, error) {
	d.mu.Lock()
	fail := d.fail
	d.mu.Unlock()
	if d.tries != nil {
		d.tries <- d.clock.Now()
	}
	if fail {
		return nil, errors.New("dial tcp 10.0.0.5:5432: connect: connection refused")
	}
	return d.Store.LeaseRenew(ctx, node, held, ttl)
}

// Renewals that fail for longer than a TTL stop no actor: each failure is logged, with
// how long they have failed, and counted. Once the database answers, the renewal names
// the lease another node took meanwhile, and renews the others.
func TestRenewerStopsNoActorWhileRenewalsFail(t *testing.T) {
	st := storetest.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	kept, taken := newSession(t, st, clock.Now()), newSession(t, st, clock.Now())
	h := &holder{held: map[uuid.UUID]int64{
		kept:  acquire(t, st, kept, "a"),
		taken: acquire(t, st, taken, "a"),
	}}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	d := &down{Store: st, clock: clock}
	r := lease.NewRenewer(lease.Config{Store: d, Holder: h, Node: func() string { return "a" }, TTL: ttl, Clock: clock,
		Logger: zerolog.New(&logs), Metrics: lease.NewMetrics(reg)})

	d.set(true)
	tries := 0
	for elapsed := time.Duration(0); elapsed <= 2*ttl; elapsed += time.Second {
		require.False(t, r.Renew(t.Context()))
		tries++
		clock.Advance(time.Second)
	}
	require.Empty(t, h.lost, "no actor is stopped, however long renewals fail")
	require.EqualValues(t, tries, counter(t, reg, "chatd_lease_renewal_failures_total"))
	var last struct {
		Level      string  `json:"level"`
		FailingFor float64 `json:"failing_for"`
	}
	lines := bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n"))
	require.Len(t, lines, tries)
	require.NoError(t, json.Unmarshal(lines[len(lines)-1], &last))
	require.Equal(t, "error", last.Level)
	require.EqualValues(t, 2*ttl/time.Millisecond, last.FailingFor, "how long renewals have failed, in ms")

	// Meanwhile the leases expired, and b took one session over.
	storetest.ExpireLease(t, st, kept)
	storetest.ExpireLease(t, st, taken)
	acquire(t, st, taken, "b")
	d.set(false)
	require.True(t, r.Renew(t.Context()))
	require.Equal(t, map[uuid.UUID]int64{taken: h.held[taken]}, h.lost, "only the actor whose session was taken stops")
	l := leaseOf(t, st, kept)
	require.Equal(t, "a", l.Node)
	require.True(t, l.Live)
}

// After a failed renewal the next comes within a second, sooner than the other nodes'
// rescue passes (every TTL/3); once renewals succeed they come every TTL/3 again.
func TestRenewerRetriesSoonAfterAFailure(t *testing.T) {
	st := storetest.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	id := newSession(t, st, clock.Now())
	h := &holder{held: map[uuid.UUID]int64{id: acquire(t, st, id, "a")}}
	d := &down{Store: st, clock: clock, tries: make(chan time.Time, 16)}
	d.set(true)
	r := lease.NewRenewer(lease.Config{Store: d, Holder: h, Node: func() string { return "a" }, TTL: ttl, Clock: clock, Logger: zerolog.Nop()})
	start := clock.Now()
	require.NoError(t, r.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	next := func(advance time.Duration) time.Duration {
		t.Helper()
		if advance > 0 {
			require.NoError(t, clock.BlockUntilContext(t.Context(), 1)) // the renewer's timer
			clock.Advance(advance)
		}
		select {
		case at := <-d.tries:
			return at.Sub(start)
		case <-t.Context().Done():
			t.Fatal("no renewal came")
			return 0
		}
	}
	require.Zero(t, next(0), "the first at once")
	require.Equal(t, time.Second, next(time.Second), "failed: again a second later")
	d.set(false)
	require.Equal(t, 2*time.Second, next(time.Second))
	// It succeeded: the next comes a third of the TTL later, not a second.
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Second)
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1), "the same timer still waits")
	require.Equal(t, 2*time.Second+ttl/3, next(ttl/3-time.Second))
	require.Empty(t, h.lost)
}

// counter returns the value of the counter name in reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A rescue pass takes up the sessions with a streaming run and no live lease, and
// leaves those a live node holds or whose run waits for a person; its first pass also
// takes up those its own node's previous life held.
func TestRescuerTakesUpRunsNoLiveNodeDrives(t *testing.T) {
	st := storetest.New(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	now := clock.Now()
	withRun := func(status chat.RunStatus) uuid.UUID {
		id := newSession(t, st, now)
		run := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r", Status: chat.RunRunning, StartedAt: now, LastActivityAt: now}
		user := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "go", Status: chat.MessageComplete, CreatedAt: now}
		require.NoError(t, st.RunStart(t.Context(), run, user, 0))
		if status != chat.RunRunning {
			run.Status = status
			require.NoError(t, st.RunUpdate(t.Context(), run, chat.RunRunning))
		}
		return id
	}
	free := withRun(chat.RunRunning)
	withRun(chat.RunAwaitingApproval) // waits for a person: the next hello takes it up
	withRun(chat.RunDone)
	live := withRun(chat.RunRunning)
	acquire(t, st, live, "b")
	mine := withRun(chat.RunRunning)
	acquire(t, st, mine, "a") // a's previous life
	expired := withRun(chat.RunRunning)
	acquire(t, st, expired, "c")
	storetest.ExpireLease(t, st, expired) // c died

	h := &holder{}
	h.rescue = func(id uuid.UUID) error {
		_, l, err := st.LeaseAcquire(t.Context(), id, "a", "a:1", ttl)
		require.NoError(t, err)
		if l.Node != "a" {
			return &conversation.ElsewhereError{Lease: l}
		}
		// The actor continues the run; here it ends it.
		r, err := st.RunLatest(t.Context(), id)
		require.NoError(t, err)
		r.Status = chat.RunDone
		return st.RunUpdate(t.Context(), r, chat.RunRunning)
	}
	r := lease.NewRescuer(lease.Config{Store: st, Holder: h, Node: func() string { return "a" }, TTL: ttl, Clock: clock, Logger: zerolog.Nop(), RescueBatch: 2})
	took := r.Pass(t.Context())
	require.ElementsMatch(t, []uuid.UUID{free, mine, expired}, took, "each once, though the first pass finds its own again")
	require.Empty(t, r.Pass(t.Context()), "nothing is left")

	// A node that took a session first makes the rescue skip it.
	gone := withRun(chat.RunRunning)
	acquire(t, st, gone, "c")
	storetest.ExpireLease(t, st, gone)
	h.rescue = func(id uuid.UUID) error {
		acquire(t, st, id, "c") // c comes back first
		return &conversation.ElsewhereError{}
	}
	require.Empty(t, r.Pass(t.Context()))
}
