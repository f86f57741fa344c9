package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
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
	r.Renew(t.Context())
	require.Empty(t, h.lost)
	require.False(t, leaseOf(t, st, kept).ExpiresAt.Before(before.ExpiresAt), "renewed from the database's now")

	// a paused past its TTL: both leases expired, by the database's clock, and b took
	// one of them. a's renewal keeps the other, and names the one it lost.
	storetest.ExpireLease(t, st, kept)
	storetest.ExpireLease(t, st, taken)
	acquire(t, st, taken, "b")
	r.Renew(t.Context())
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
	r.Renew(t.Context())
	require.Equal(t, was, leaseOf(t, st, orphan), "not renewed")
	storetest.ExpireLease(t, st, orphan)
	acquire(t, st, orphan, "b")
	require.NoError(t, r.Start(t.Context()))
	require.NoError(t, r.Stop(t.Context()))
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
