package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

const ttl = 10 * time.Second

// A lease is held by one node until it expires, by the database's clock: another
// node's acquisition is refused meanwhile and takes it once expired, with a greater
// token; a renewal extends only what the node still holds (an expired lease nobody took
// too); a release gives back only the acquisition it names.
func TestLeaseLifecycle(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID

	_, l, err := s.LeaseAcquire(b.ctx, id, "a", "10.0.0.1:8080", ttl)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Node: "a", Addr: "10.0.0.1:8080", ExpiresAt: l.ExpiresAt, Token: 1, Live: true}, l)
	first := l.ExpiresAt

	sess, l, err := s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", ttl)
	require.NoError(t, err)
	require.Equal(t, "a", l.Node, "a holds it: b gets who does")
	require.True(t, l.Live)
	require.Equal(t, id, sess.ID)

	held, err := s.LeaseRenew(b.ctx, "a", map[uuid.UUID]int64{id: 1}, ttl)
	require.NoError(t, err)
	require.Equal(t, []store.HeldLease{{SessionID: id, Token: 1}}, held)
	got, err := s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.False(t, got.ExpiresAt.Before(first), "renewed from the database's now")

	// Its time runs out, by the database's clock: it is no longer live, but until
	// another node takes it, its holder's renewal keeps it (nothing was lost).
	storetest.ExpireLease(t, s, id)
	got, err = s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "a", got.Node)
	require.False(t, got.Live)
	held, err = s.LeaseRenew(b.ctx, "a", map[uuid.UUID]int64{id: 1}, ttl)
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", ttl)
	require.NoError(t, err)
	require.Equal(t, "a", l.Node, "renewed after it expired: a's again")

	// a stops renewing: once its lease expires, b takes it over.
	storetest.ExpireLease(t, s, id)
	sess, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", ttl)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Node: "b", Addr: "10.0.0.2:8080", ExpiresAt: l.ExpiresAt, Token: 2, Live: true}, l)
	require.Equal(t, id, sess.ID)
	held, err = s.LeaseRenew(b.ctx, "a", map[uuid.UUID]int64{id: 1}, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "a learns that it lost it")
	held, err = s.LeaseRenew(b.ctx, "b", map[uuid.UUID]int64{id: 1}, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "a token that is not the lease's renews nothing")

	require.NoError(t, s.LeaseRelease(b.ctx, id, "a", 1))
	got, err = s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "b", got.Node, "a's release names an acquisition that is over")
	require.NoError(t, s.LeaseRelease(b.ctx, id, "b", 2))
	got, err = s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Token: 2}, got, "free, and the token stays")

	// The same node acquires again at once: a restarted node takes its sessions back.
	_, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", ttl)
	require.NoError(t, err)
	_, l2, err := s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", ttl)
	require.NoError(t, err)
	require.Equal(t, "b", l2.Node)
	require.Greater(t, l2.Token, l.Token, "every acquisition fences the one before, the node's own too")

	_, _, err = s.LeaseAcquire(b.ctx, uuid.New(), "b", "x:1", ttl)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.LeaseGet(b.ctx, uuid.New())
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Every write an actor makes, under a fence that is no longer the session's token, is
// refused with ErrFenced and writes nothing; under the current token it is written.
func TestFencedWritesAreRefusedAfterATakeover(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	_, old, err := s.LeaseAcquire(b.ctx, id, "a", "a:1", ttl)
	require.NoError(t, err)
	fa := store.WithFence(b.ctx, old.Token)

	// a writes a run with a segment, and a tool call still running.
	run := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r1", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	user := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "go", Status: chat.MessageComplete, CreatedAt: b.now}
	require.NoError(t, s.RunStart(fa, run, user, 0))
	seg := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 2, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(fa, seg))
	empty := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 3, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(fa, empty))

	// b takes the session over once a's lease has expired.
	storetest.ExpireLease(t, s, id)
	_, cur, err := s.LeaseAcquire(b.ctx, id, "b", "b:1", ttl)
	require.NoError(t, err)
	require.Equal(t, "b", cur.Node)
	before := sessionState(t, s, b.ctx, id)

	closed := seg
	closed.Content, closed.Status, closed.UpdatedAt = "late text", chat.MessageComplete, b.now.Add(time.Minute)
	ended := run
	ended.Status, ended.EndedAt, ended.LastActivityAt = chat.RunDone, &closed.UpdatedAt, closed.UpdatedAt
	retry := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r2", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now, RetryOf: &run.ID}
	second := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r3", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	secondUser := chat.Message{ID: uuid.New(), SessionID: id, RunID: &second.ID, Position: 4, Role: chat.RoleUser, Content: "again", Status: chat.MessageComplete, CreatedAt: b.now}
	third := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 4, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	for name, write := range map[string]func() error{
		"MessageInsert": func() error { return s.MessageInsert(fa, third) },
		"MessageUpdate": func() error { return s.MessageUpdate(fa, closed, chat.MessageStreaming) },
		"MessagesSettleRun": func() error {
			n, err := s.MessagesSettleRun(fa, run.ID, chat.MessageInterrupted, b.now)
			require.Zero(t, n)
			return err
		},
		"MessageDeleteEmpty": func() error {
			deleted, err := s.MessageDeleteEmpty(fa, empty.ID)
			require.False(t, deleted)
			return err
		},
		"RunUpdate":          func() error { return s.RunUpdate(fa, ended, chat.RunRunning) },
		"RunContinue":        func() error { return s.RunContinue(fa, ended, 0, chat.RunRunning) },
		"RunStart":           func() error { return s.RunStart(fa, second, secondUser, 0) },
		"RunStartRetry":      func() error { return s.RunStartRetry(fa, retry, user.ID, 0) },
		"RunStart (limited)": func() error { return s.RunStart(fa, second, secondUser, 5) },
	} {
		err := write()
		if name == "MessagesSettleRun" || name == "MessageDeleteEmpty" {
			require.NoError(t, err, name) // they report what they changed: nothing
			continue
		}
		require.ErrorIs(t, err, store.ErrFenced, name)
	}
	require.Equal(t, before, sessionState(t, s, b.ctx, id), "a wrote nothing after the takeover")

	// b, under its own token, writes.
	fb := store.WithFence(b.ctx, cur.Token)
	require.NoError(t, s.MessageUpdate(fb, closed, chat.MessageStreaming))
	require.NoError(t, s.RunUpdate(fb, ended, chat.RunRunning))
	require.NoError(t, s.MessageInsert(fb, third))
	deleted, err := s.MessageDeleteEmpty(fb, empty.ID)
	require.NoError(t, err)
	require.True(t, deleted)
}

// sessionState is the session's rows as JSON.
func sessionState(t *testing.T, s *store.Store, ctx context.Context, id uuid.UUID) string {
	t.Helper()
	var out string
	require.NoError(t, s.Pool().QueryRow(ctx, `
		SELECT jsonb_build_array(
			(SELECT to_jsonb(x) FROM sessions x WHERE x.id = $1),
			(SELECT jsonb_agg(to_jsonb(r) ORDER BY r.id) FROM runs r WHERE r.session_id = $1),
			(SELECT jsonb_agg(to_jsonb(m) ORDER BY m.position, m.id) FROM messages m WHERE m.session_id = $1))::text`, id).Scan(&out))
	return out
}

// Sandboxes are per node: another node sees no sandbox for a session whose sandbox this
// one made (it counts as killed, so the session gets a new one and is told), and each
// node's janitor lists only its own.
func TestNodeSandboxes(t *testing.T) {
	s, b := setup(t)
	a := s.NodeSandboxes(func() string { return "a" })
	other := s.NodeSandboxes(func() string { return "b" })
	id := b.session.ID
	require.NoError(t, a.SessionSetSandbox(b.ctx, id, "bwrap-1", b.now))

	got, err := a.SessionSandbox(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "bwrap-1", got)
	killed, err := a.SessionSandboxKilledAt(b.ctx, id)
	require.NoError(t, err)
	require.Nil(t, killed)

	got, err = other.SessionSandbox(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "", got, "b's provider does not know a's sandbox")
	killed, err = other.SessionSandboxKilledAt(b.ctx, id)
	require.NoError(t, err)
	require.NotNil(t, killed, "to b it is as if killed")

	later := b.now.Add(time.Hour)
	idle, err := a.SessionSandboxesIdle(b.ctx, later, 10)
	require.NoError(t, err)
	require.Len(t, idle, 1)
	idle, err = other.SessionSandboxesIdle(b.ctx, later, 10)
	require.NoError(t, err)
	require.Empty(t, idle, "b's janitor leaves a's sandbox alone")

	// b gives the session a sandbox of its own: now it is b's.
	require.NoError(t, other.SessionSetSandbox(b.ctx, id, "bwrap-2", later))
	got, err = other.SessionSandbox(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "bwrap-2", got)
	got, err = a.SessionSandbox(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "", got)
}

// SessionOpen, case by case: what it finds, and whether it acquires.
func TestSessionOpen(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	open := func(req store.OpenRequest) store.Opened {
		t.Helper()
		o, err := s.SessionOpen(b.ctx, id, req)
		require.NoError(t, err)
		return o
	}
	asA := store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl}
	asB := store.OpenRequest{Node: "b", Addr: "b:1", TTL: ttl}

	// A session that does not exist: nothing found, nothing made.
	o, err := s.SessionOpen(b.ctx, uuid.New(), asA)
	require.NoError(t, err)
	require.Equal(t, store.Opened{}, o)

	// Without a node it only reads.
	startRun(t, s, b, "r1", 1)
	o = open(store.OpenRequest{})
	require.True(t, o.Found)
	require.Equal(t, b.session.ID, o.Session.ID)
	require.Equal(t, "alice", o.Session.Owner)
	require.EqualValues(t, 1, o.MaxPosition)
	require.False(t, o.Acquired)
	require.Equal(t, store.Lease{}, o.Lease, "free, never acquired")

	// Another owner's session, with the owner checked: nothing is acquired.
	o = open(store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl, Owner: "mallory", CheckOwner: true})
	require.True(t, o.Found)
	require.Equal(t, "alice", o.Session.Owner)
	require.False(t, o.Acquired)
	require.Equal(t, store.Lease{}, o.Lease)

	// Free: taken, from nobody.
	o = open(store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl, Owner: "alice", CheckOwner: true})
	require.True(t, o.Acquired)
	require.Equal(t, "", o.PrevNode)
	require.Equal(t, store.Lease{Node: "a", Addr: "a:1", ExpiresAt: o.Lease.ExpiresAt, Token: 1, Live: true}, o.Lease)
	require.EqualValues(t, 1, o.MaxPosition)

	// The node's own again (a restarted node): taken, with a new token.
	o = open(asA)
	require.True(t, o.Acquired)
	require.Equal(t, "a", o.PrevNode)
	require.EqualValues(t, 2, o.Lease.Token)

	// Held elsewhere and live: b gets who holds it, and changes nothing.
	o = open(asB)
	require.True(t, o.Found)
	require.False(t, o.Acquired)
	require.Equal(t, store.Lease{Node: "a", Addr: "a:1", ExpiresAt: o.Lease.ExpiresAt, Token: 2, Live: true}, o.Lease)

	// Held elsewhere and expired, by the database's clock: a takeover.
	storetest.ExpireLease(t, s, id)
	o = open(asB)
	require.True(t, o.Acquired)
	require.Equal(t, "a", o.PrevNode)
	require.Equal(t, store.Lease{Node: "b", Addr: "b:1", ExpiresAt: o.Lease.ExpiresAt, Token: 3, Live: true}, o.Lease)

	// A tombstone is found, deleted, and never acquired, not even once its lease
	// expired: a process that opens it can write nothing under a new token.
	require.NoError(t, s.SessionDelete(b.ctx, "alice", id, b.now))
	storetest.ExpireLease(t, s, id)
	o = open(asA)
	require.True(t, o.Found)
	require.NotNil(t, o.Session.DeletedAt)
	require.False(t, o.Acquired)
	require.Equal(t, "b", o.Lease.Node)
	require.False(t, o.Lease.Live)
	require.EqualValues(t, 3, o.Lease.Token)
	require.Zero(t, o.MaxPosition, "its messages went with it")
}

// SessionOpen is one statement, whatever it finds and whether it acquires: a hello for
// a session that does not exist, or is not the caller's, costs one round trip.
func TestSessionOpenIsOneStatement(t *testing.T) {
	counter := &batchCounter{}
	s, b := setup(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	startRun(t, s, b, "r1", 1)
	for name, c := range map[string]struct {
		id  uuid.UUID
		req store.OpenRequest
	}{
		"missing":         {uuid.New(), store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl}},
		"read":            {b.session.ID, store.OpenRequest{}},
		"not the owner's": {b.session.ID, store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl, Owner: "mallory", CheckOwner: true}},
		"acquired":        {b.session.ID, store.OpenRequest{Node: "a", Addr: "a:1", TTL: ttl}},
		"held elsewhere":  {b.session.ID, store.OpenRequest{Node: "b", Addr: "b:1", TTL: ttl}},
	} {
		counter.alone.Store(0)
		counter.batches.Store(0)
		_, err := s.SessionOpen(b.ctx, c.id, c.req)
		require.NoError(t, err, name)
		require.EqualValues(t, 1, counter.alone.Load(), name)
		require.Zero(t, counter.batches.Load(), name)
	}
}

// The lock modes at work. A fenced write in flight (its transaction open) holds up a
// takeover, which then refuses every later write of the old holder, and counts what
// the write stored; a renewal waits for neither the write nor the takeover.
func TestTakeoverWaitsForFencedWritesAndRenewalsWaitForNothing(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	_, a, err := s.LeaseAcquire(b.ctx, id, "a", "a:1", ttl)
	require.NoError(t, err)
	fa := store.WithFence(b.ctx, a.Token)
	run, _ := startRun(t, s, b, "r1", 1)
	msg := func(pos int64) chat.Message {
		return chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: pos, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	}

	// inFlight makes a's fenced insert of m in a transaction it keeps open until the
	// returned func is called; that func returns the transaction's outcome.
	inFlight := func(m chat.Message) (commit func() error) {
		written, release, done := make(chan error, 1), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- s.InTx(b.ctx, func(tx *store.Store) error {
				err := tx.MessageInsert(fa, m)
				written <- err
				<-release
				return err
			})
		}()
		require.NoError(t, <-written)
		var once sync.Once
		commit = func() error {
			once.Do(func() { close(release) })
			return <-done
		}
		t.Cleanup(func() { once.Do(func() { close(release) }) }) // a failed test ends it too
		return commit
	}
	openAsB := func() chan store.Opened {
		out := make(chan store.Opened, 1)
		go func() {
			o, err := s.SessionOpen(b.ctx, id, store.OpenRequest{Node: "b", Addr: "b:1", TTL: ttl})
			assert.NoError(t, err)
			out <- o
		}()
		return out
	}
	renewA := func() []store.HeldLease {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		held, err := s.LeaseRenew(ctx, "a", map[uuid.UUID]int64{id: a.Token}, ttl)
		require.NoError(t, err, "a renewal must wait for nothing")
		return held
	}

	// a's write is in flight, and a's lease expires. b's takeover waits for the write;
	// a's renewal waits for neither, and keeps the lease a's.
	commit := inFlight(msg(2))
	storetest.ExpireLease(t, s, id)
	opened := openAsB()
	awaitLockWait(t, s)
	require.Len(t, renewA(), 1, "renewed while a write and a takeover are in flight")
	select {
	case <-opened:
		t.Fatal("the takeover did not wait for the fenced write in flight")
	default:
	}
	require.NoError(t, commit())
	o := <-opened
	require.False(t, o.Acquired, "a renewed meanwhile: its lease is live")
	require.Equal(t, "a", o.Lease.Node)

	// Again, and a does not renew: b takes over once the write committed, and counts
	// its message; a's writes after it are refused.
	commit = inFlight(msg(3))
	storetest.ExpireLease(t, s, id)
	opened = openAsB()
	awaitLockWait(t, s)
	select {
	case <-opened:
		t.Fatal("the takeover did not wait for the fenced write in flight")
	default:
	}
	require.NoError(t, commit())
	o = <-opened
	require.True(t, o.Acquired)
	require.Equal(t, "a", o.PrevNode)
	require.Greater(t, o.Lease.Token, a.Token)
	require.EqualValues(t, 3, o.MaxPosition, "the position counts the write the takeover waited for")
	require.ErrorIs(t, s.MessageInsert(fa, msg(4)), store.ErrFenced)
	require.Empty(t, renewA(), "a learns it lost the lease")
}

// awaitLockWait waits until a statement on s's database waits for a row lock.
func awaitLockWait(t *testing.T, s *store.Store) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		var n int
		require.NoError(t, s.Pool().QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'").Scan(&n))
		if n > 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("no statement came to wait for a lock")
		}
	}
}
