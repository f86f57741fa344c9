package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

const ttl = 10 * time.Second

// A lease is held by one node until it expires: another node's acquisition is refused
// meanwhile and takes it once expired, with a greater token; a renewal extends only what
// the node still holds; a release gives back only the acquisition it names.
func TestLeaseLifecycle(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	now := b.now

	_, l, err := s.LeaseAcquire(b.ctx, id, "a", "10.0.0.1:8080", now, ttl)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Node: "a", Addr: "10.0.0.1:8080", ExpiresAt: now.Add(ttl), Token: 1}, l)
	require.True(t, l.Live(now))
	require.False(t, l.Live(now.Add(ttl)))

	sess, l, err := s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", now.Add(ttl/2), ttl)
	require.NoError(t, err)
	require.Equal(t, "a", l.Node, "a holds it: b gets who does")
	require.Equal(t, chat.Session{}, sess)

	held, err := s.LeaseRenew(b.ctx, "a", map[uuid.UUID]int64{id: 1}, now.Add(ttl/2), ttl)
	require.NoError(t, err)
	require.Equal(t, []store.HeldLease{{SessionID: id, Token: 1}}, held)
	_, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", now.Add(ttl+time.Second), ttl)
	require.NoError(t, err)
	require.Equal(t, "a", l.Node, "renewed: still a's a TTL after it was first taken")

	// a stops renewing: once its lease expires, b takes it over.
	later := now.Add(ttl/2 + ttl)
	sess, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", later, ttl)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Node: "b", Addr: "10.0.0.2:8080", ExpiresAt: later.Add(ttl), Token: 2}, l)
	require.Equal(t, id, sess.ID)
	held, err = s.LeaseRenew(b.ctx, "a", map[uuid.UUID]int64{id: 1}, later, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "a learns that it lost it")
	held, err = s.LeaseRenew(b.ctx, "b", map[uuid.UUID]int64{id: 1}, later, ttl)
	require.NoError(t, err)
	require.Empty(t, held, "a token that is not the lease's renews nothing")

	require.NoError(t, s.LeaseRelease(b.ctx, id, "a", 1))
	got, err := s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "b", got.Node, "a's release names an acquisition that is over")
	require.NoError(t, s.LeaseRelease(b.ctx, id, "b", 2))
	got, err = s.LeaseGet(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.Lease{Token: 2}, got, "free, and the token stays")

	// The same node acquires again at once: a restarted node takes its sessions back.
	_, l, err = s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", later, ttl)
	require.NoError(t, err)
	_, l2, err := s.LeaseAcquire(b.ctx, id, "b", "10.0.0.2:8080", later, ttl)
	require.NoError(t, err)
	require.Equal(t, "b", l2.Node)
	require.Greater(t, l2.Token, l.Token, "every acquisition fences the one before, the node's own too")

	n, err := s.LeaseReleaseAll(b.ctx, "b")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	_, _, err = s.LeaseAcquire(b.ctx, uuid.New(), "b", "x:1", later, ttl)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Every write an actor makes, under a fence that is no longer the session's token, is
// refused with ErrFenced and writes nothing; under the current token it is written.
func TestFencedWritesAreRefusedAfterATakeover(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	_, old, err := s.LeaseAcquire(b.ctx, id, "a", "a:1", b.now, ttl)
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

	// b takes the session over.
	_, cur, err := s.LeaseAcquire(b.ctx, id, "b", "b:1", b.now.Add(2*ttl), ttl)
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
		"RunStartRetry":      func() error { return s.RunStartRetry(fa, retry, 0) },
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
			(SELECT to_jsonb(x) - 'lease_node' - 'lease_addr' - 'lease_expires_at' - 'lease_token' FROM sessions x WHERE x.id = $1),
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
