package store_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// tryRun starts a run in session id with the limit maxActive, at position 1.
func tryRun(t *testing.T, s *store.Store, b bundle, id uuid.UUID, maxActive int) (chat.Run, error) {
	t.Helper()
	run := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r-" + uuid.NewString(), Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	user := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "go", Status: chat.MessageComplete, CreatedAt: b.now}
	return run, s.RunStart(b.ctx, run, user, maxActive)
}

func count(t *testing.T, s *store.Store, b bundle, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool().QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

// A user's active runs are counted across their sessions: past the limit a start stores
// nothing (no run, no message, the session not marked active) and says so; another user
// is not counted with them; once a run ends there is room again.
func TestRunStartLimitsTheOwnersActiveRuns(t *testing.T) {
	s, b := setup(t)
	a1, a2, a3 := newSession(t, s, b, "alice"), newSession(t, s, b, "alice"), newSession(t, s, b, "alice")
	bob := newSession(t, s, b, "bob")

	first, err := tryRun(t, s, b, a1, 2)
	require.NoError(t, err)
	_, err = tryRun(t, s, b, a2, 2)
	require.NoError(t, err)
	refused, err := tryRun(t, s, b, a3, 2)
	require.ErrorIs(t, err, store.ErrRunLimit)
	require.Contains(t, err.Error(), "2 active, the limit is 2")
	require.Zero(t, count(t, s, b, "SELECT count(*) FROM runs WHERE id = $1", refused.ID))
	require.Zero(t, count(t, s, b, "SELECT count(*) FROM messages WHERE session_id = $1", a3))
	require.Zero(t, count(t, s, b, "SELECT count(*) FROM sessions WHERE id = $1 AND active_at IS NOT NULL", a3))

	_, err = tryRun(t, s, b, bob, 2)
	require.NoError(t, err, "bob's runs are his own")
	_, err = tryRun(t, s, b, a3, 0)
	require.NoError(t, err, "0 is no limit")
	_, err = tryRun(t, s, b, newSession(t, s, b, "alice"), 3)
	require.ErrorIs(t, err, store.ErrRunLimit, "alice has three active runs now")

	endRun(t, s, b, first, chat.RunDone)
	third, err := tryRun(t, s, b, newSession(t, s, b, "alice"), 3)
	require.NoError(t, err, "an ended run frees its place")
	require.Equal(t, "alice", ownerOf(t, s, b, third.ID))

	// A deleted session is still not found, under the limit or not.
	gone := newSession(t, s, b, "bob")
	require.NoError(t, s.SessionDelete(b.ctx, "bob", gone, b.now))
	_, err = tryRun(t, s, b, gone, 5)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func ownerOf(t *testing.T, s *store.Store, b bundle, runID uuid.UUID) string {
	t.Helper()
	var owner string
	require.NoError(t, s.Pool().QueryRow(b.ctx, "SELECT owner FROM runs WHERE id = $1", runID).Scan(&owner))
	return owner
}

// A retry and a person's continue count as starts: refused at the limit, with nothing
// written; allowed once there is room.
func TestRetryAndContinueAreLimited(t *testing.T) {
	s, b := setup(t)
	busy := newSession(t, s, b, "alice")
	_, err := tryRun(t, s, b, busy, 0)
	require.NoError(t, err)

	ended, err := tryRun(t, s, b, b.session.ID, 0)
	require.NoError(t, err)
	ended = endRun(t, s, b, ended, chat.RunInterrupted)

	retry := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "retry", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now, RetryOf: &ended.ID}
	require.ErrorIs(t, s.RunStartRetry(b.ctx, retry, uuid.New(), 1), store.ErrRunLimit)
	require.Zero(t, count(t, s, b, "SELECT count(*) FROM runs WHERE id = $1", retry.ID))

	cont := ended
	cont.Status, cont.EndedAt, cont.LastActivityAt = chat.RunRunning, nil, b.now.Add(time.Minute)
	require.ErrorIs(t, s.RunContinue(b.ctx, cont, 1, chat.RunInterrupted), store.ErrRunLimit)
	got, err := s.RunGet(b.ctx, ended.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunInterrupted, got.Status, "the refused continue wrote nothing")

	require.NoError(t, s.RunContinue(b.ctx, cont, 2, chat.RunInterrupted))
	require.NoError(t, s.RunStartRetry(b.ctx, retry, uuid.New(), 3))
	// Inside a transaction the lock is the transaction's.
	require.NoError(t, s.InTx(b.ctx, func(tx *store.Store) error {
		_, err := tryRun(t, tx, b, newSession(t, s, b, "alice"), 4)
		return err
	}), "three active, the limit is four")
}

// Starts at the same instant, in as many sessions of one user, on separate connections
// (as separate chatd processes would): exactly the limit's worth are stored. Without the
// owner's lock each statement would count the runs before any of the others committed.
func TestConcurrentStartsTakeExactlyTheLimit(t *testing.T) {
	s, b := setup(t)
	const starts, limit = 12, 3
	sessions := make([]uuid.UUID, starts)
	for i := range sessions {
		sessions[i] = newSession(t, s, b, "alice")
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stored  int
		refused int
		ready   = make(chan struct{})
	)
	for _, id := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-ready
			_, err := tryRun(t, s, b, id, limit)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.Is(err, store.ErrRunLimit):
				refused++
			default:
				t.Errorf("start: %v", err)
			}
		}()
	}
	close(ready)
	wg.Wait()
	require.Equal(t, limit, stored)
	require.Equal(t, starts-limit, refused)
	require.Equal(t, limit, count(t, s, b, "SELECT count(*) FROM runs WHERE owner = 'alice' AND status = 'running'"))
}
