package store_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// startRunAt starts a run of session id at time at with the user message content.
func startRunAt(t *testing.T, s *store.Store, b bundle, id uuid.UUID, requestID, content string, pos int64, at time.Time) chat.Run {
	t.Helper()
	run := chat.Run{ID: uuid.New(), SessionID: id, RequestID: requestID, Status: chat.RunRunning, StartedAt: at, LastActivityAt: at}
	user := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: pos, Role: chat.RoleUser, Content: content, Status: chat.MessageComplete, CreatedAt: at}
	require.NoError(t, s.RunStart(b.ctx, run, user, 0))
	return run
}

func newSession(t *testing.T, s *store.Store, b bundle, owner string) uuid.UUID {
	t.Helper()
	sess, err := s.SessionCreate(b.ctx, chat.Session{ID: uuid.New(), Owner: owner, CreatedAt: b.now})
	require.NoError(t, err)
	return sess.ID
}

// The run's statement titles the session from its first message and marks it active;
// later runs move it up the list but keep the title, and so does a person's title.
func TestRunStartTitlesAndActivatesTheSession(t *testing.T) {
	s, b := setup(t)
	sum, err := s.SessionSummary(b.ctx, "alice", b.session.ID)
	require.NoError(t, err)
	require.Equal(t, "", sum.Title)
	require.Equal(t, b.now, sum.ActiveAt, "a session with no run counts as active since it was created")

	startRunAt(t, s, b, b.session.ID, "r1", "  plan   a\ntrip  ", 1, b.now.Add(time.Second))
	sum, err = s.SessionSummary(b.ctx, "alice", b.session.ID)
	require.NoError(t, err)
	require.Equal(t, "plan a trip", sum.Title)
	require.Equal(t, b.now.Add(time.Second), sum.ActiveAt)
	require.Equal(t, "plan a trip", sum.Preview)
	require.Equal(t, chat.RunRunning, sum.ActiveRunStatus)

	startRunAt(t, s, b, b.session.ID, "r2", "something else", 2, b.now.Add(2*time.Second))
	sum, err = s.SessionSummary(b.ctx, "alice", b.session.ID)
	require.NoError(t, err)
	require.Equal(t, "plan a trip", sum.Title, "only the first message titles the session")
	require.Equal(t, b.now.Add(2*time.Second), sum.ActiveAt)

	require.NoError(t, s.SessionRename(b.ctx, "alice", b.session.ID, "Trip"))
	sum, err = s.SessionSummary(b.ctx, "alice", b.session.ID)
	require.NoError(t, err)
	require.Equal(t, "Trip", sum.Title)
	require.Equal(t, b.now.Add(2*time.Second), sum.ActiveAt, "a rename is not activity")

	// A person's title is kept by later first-message titling too: a session renamed
	// before its first run keeps its name.
	named := newSession(t, s, b, "alice")
	require.NoError(t, s.SessionRename(b.ctx, "alice", named, "Named"))
	startRunAt(t, s, b, named, "r1", "hello", 1, b.now.Add(3*time.Second))
	sum, err = s.SessionSummary(b.ctx, "alice", named)
	require.NoError(t, err)
	require.Equal(t, "Named", sum.Title)

	require.ErrorIs(t, s.SessionRename(b.ctx, "bob", named, "Mine"), store.ErrNotFound)
	_, err = s.SessionSummary(b.ctx, "bob", named)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// The list pages by keyset over one user's active sessions, newest activity first, and
// leaves out sessions with no run, deleted ones and other users'.
func TestSessionsListPages(t *testing.T) {
	s, b := setup(t)
	var want []uuid.UUID // newest first
	for i := range 5 {
		id := newSession(t, s, b, "alice")
		// Three sessions share an activity time, so a page of two ends inside the tie:
		// the id breaks it, and the next page starts right after the cursor's id.
		at := b.now.Add(time.Duration(min(i, 2)) * time.Minute)
		startRunAt(t, s, b, id, "r1", strings.Repeat("word ", 40), 1, at)
		want = append([]uuid.UUID{id}, want...)
	}
	// The three tied ones (the first three of want) come greatest id first.
	slices.SortFunc(want[:3], func(x, y uuid.UUID) int { return -strings.Compare(x.String(), y.String()) })
	newSession(t, s, b, "alice") // never sent to
	bobs := newSession(t, s, b, "bob")
	startRunAt(t, s, b, bobs, "r1", "bob's", 1, b.now.Add(time.Hour))
	deleted := newSession(t, s, b, "alice")
	startRunAt(t, s, b, deleted, "r1", "gone", 1, b.now.Add(time.Hour))
	require.NoError(t, s.SessionDelete(b.ctx, "alice", deleted, b.now))

	var got []uuid.UUID
	var after *chat.SessionCursor
	for pages := 0; ; pages++ {
		require.Less(t, pages, 5, "paging does not end")
		page, err := s.SessionsList(b.ctx, "alice", after, 2)
		require.NoError(t, err)
		for _, sum := range page {
			got = append(got, sum.ID)
			require.Equal(t, strings.Repeat("word ", 23)+"word", sum.Preview, "cut to 120 characters, without the space at the cut")
			require.Equal(t, strings.Repeat("word ", 15)+"word…", sum.Title)
		}
		if len(page) < 2 {
			break
		}
		last := page[len(page)-1]
		after = &chat.SessionCursor{ActiveAt: last.ActiveAt, ID: last.ID}
	}
	require.Equal(t, want, got)
	require.NotContains(t, got, bobs)
}

// A deletion leaves a tombstone: runs and messages are gone, the id cannot start a run or
// take a sandbox again, and deleting again is not found.
func TestSessionDeleteLeavesATombstone(t *testing.T) {
	s, b := setup(t)
	run := startRunAt(t, s, b, b.session.ID, "r1", "hello", 1, b.now)
	retry := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "r2", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now, RetryOf: &run.ID}
	run.Status, run.EndedAt = chat.RunError, &b.now
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.RunRunning))
	require.NoError(t, s.RunStartRetry(b.ctx, retry, uuid.New(), 0))
	require.NoError(t, s.SessionSetSandbox(b.ctx, b.session.ID, "sb-1", b.now))

	require.ErrorIs(t, s.SessionDelete(b.ctx, "bob", b.session.ID, b.now), store.ErrNotFound, "not bob's to delete")
	require.NoError(t, s.SessionDelete(b.ctx, "alice", b.session.ID, b.now))
	require.ErrorIs(t, s.SessionDelete(b.ctx, "alice", b.session.ID, b.now), store.ErrNotFound)

	sess, err := s.SessionGet(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.NotNil(t, sess.DeletedAt)
	require.Equal(t, "", sess.Title)
	require.Equal(t, "", sess.SandboxID)
	var runs, msgs int
	require.NoError(t, s.Pool().QueryRow(b.ctx, "SELECT count(*) FROM runs WHERE session_id = $1", b.session.ID).Scan(&runs))
	require.NoError(t, s.Pool().QueryRow(b.ctx, "SELECT count(*) FROM messages WHERE session_id = $1", b.session.ID).Scan(&msgs))
	require.Zero(t, runs)
	require.Zero(t, msgs)

	// A process that still holds the session writes nothing.
	late := chat.Run{ID: uuid.New(), SessionID: b.session.ID, RequestID: "r3", Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	user := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &late.ID, Position: 2, Role: chat.RoleUser, Content: "again", Status: chat.MessageComplete, CreatedAt: b.now}
	require.ErrorIs(t, s.RunStart(b.ctx, late, user, 0), store.ErrNotFound)
	late.RetryOf = &run.ID
	require.ErrorIs(t, s.RunStartRetry(b.ctx, late, uuid.New(), 0), store.ErrNotFound)
	require.ErrorIs(t, s.SessionSetSandbox(b.ctx, b.session.ID, "sb-2", b.now), store.ErrNotFound)
	require.ErrorIs(t, s.RunUpdate(b.ctx, run, chat.RunError), store.ErrNotFound)
	seg := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 3, Role: chat.RoleAssistant, Kind: chat.KindText, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.Error(t, s.MessageInsert(b.ctx, seg), "its run is gone")
	require.ErrorIs(t, s.SessionRename(b.ctx, "alice", b.session.ID, "back"), store.ErrNotFound)

	// Creating it again (a hello) returns the tombstone, not a new session.
	again, err := s.SessionCreate(b.ctx, chat.Session{ID: b.session.ID, Owner: "alice", CreatedAt: b.now})
	require.NoError(t, err)
	require.NotNil(t, again.DeletedAt)
}

// A person's resume marks the session active in the run's own statement.
func TestRunContinueMarksTheSessionActive(t *testing.T) {
	s, b := setup(t)
	run := startRunAt(t, s, b, b.session.ID, "r1", "hello", 1, b.now)
	run.Status, run.EndedAt = chat.RunInterrupted, &b.now
	require.NoError(t, s.RunUpdate(b.ctx, run, chat.RunRunning))

	later := b.now.Add(time.Hour)
	run.Status, run.EndedAt, run.LastActivityAt = chat.RunRunning, nil, later
	require.ErrorIs(t, s.RunContinue(b.ctx, run, 0, chat.RunDone), store.ErrStale)
	require.NoError(t, s.RunContinue(b.ctx, run, 0, chat.RunInterrupted))
	sum, err := s.SessionSummary(b.ctx, "alice", b.session.ID)
	require.NoError(t, err)
	require.Equal(t, later, sum.ActiveAt)
	require.Equal(t, run.ID, sum.ActiveRunID)
}

// A user's live sessions stop at the limit, however many creations race, on one pool or
// several (one per node); a session that exists is returned over the limit too, a
// deleted one makes room, and the anonymous user and a limit of 0 are not limited.
func TestSessionCreateLimited(t *testing.T) {
	s, b := setup(t)
	pool, err := pgxpool.New(b.ctx, s.Pool().Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	other := store.New(pool) // another node's pool on the same database
	const limit = 3
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for i := range 12 {
		st := s
		if i%2 == 1 {
			st = other
		}
		wg.Go(func() {
			_, err := st.SessionCreateLimited(b.ctx, chat.Session{ID: uuid.New(), Owner: "carol", CreatedAt: b.now}, limit)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	created := 0
	for err := range errs {
		if err == nil {
			created++
			continue
		}
		require.ErrorIs(t, err, store.ErrSessionLimit)
	}
	require.Equal(t, limit, created)
	var ids []uuid.UUID
	rows, err := s.Pool().Query(b.ctx, "SELECT id FROM sessions WHERE owner = 'carol'")
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, limit)

	again, err := s.SessionCreateLimited(b.ctx, chat.Session{ID: ids[0], Owner: "carol", CreatedAt: b.now}, limit)
	require.NoError(t, err, "an existing session is not a new one")
	require.Equal(t, ids[0], again.ID)

	_, _, err = s.SessionForClientID(b.ctx, "carol", "chat-1", b.now, limit)
	require.ErrorIs(t, err, store.ErrSessionLimit)
	require.NoError(t, s.SessionDelete(b.ctx, "carol", ids[0], b.now))
	id, deleted, err := s.SessionForClientID(b.ctx, "carol", "chat-1", b.now, limit)
	require.NoError(t, err, "the deleted one made room")
	require.False(t, deleted)
	found, _, err := s.SessionForClientID(b.ctx, "carol", "chat-1", b.now, limit)
	require.NoError(t, err, "the chat's session exists: found over the limit")
	require.Equal(t, id, found)

	for range limit + 1 {
		_, err := s.SessionCreateLimited(b.ctx, chat.Session{ID: uuid.New(), Owner: "", CreatedAt: b.now}, limit)
		require.NoError(t, err, "the anonymous user is not limited")
		_, err = s.SessionCreateLimited(b.ctx, chat.Session{ID: uuid.New(), Owner: "dave", CreatedAt: b.now}, 0)
		require.NoError(t, err, "0 is no limit")
	}
}
