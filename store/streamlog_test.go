package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// leasedSession makes a session whose lease node a holds, and returns it with the lease's token.
func leasedSession(t *testing.T, s *store.Store) (uuid.UUID, int64) {
	t.Helper()
	ctx := t.Context()
	sess, err := s.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: time.Now()})
	require.NoError(t, err)
	_, l, err := s.LeaseAcquire(ctx, sess.ID, "a", "a:1", time.Minute)
	require.NoError(t, err)
	return sess.ID, l.Token
}

// The stream log's statement, whose parameters the store encodes itself, stores every
// chunk as it was given: many of them, text of every kind, offsets past 64 KiB; it
// leaves out the chunks of a stale fence and keeps a chunk stored twice as it was; it
// removes the logs of the messages in done, alone or beside new chunks; and it is timed
// under its own name like every statement.
func TestStreamLogSyncStoresWhatItIsGiven(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = store.NewMetrics(reg) })
	ctx := t.Context()
	sess, fence := leasedSession(t, s)
	other, otherFence := leasedSession(t, s)

	texts := []string{"Hello", "", "é, 漢字, 🙂", strings.Repeat("long text ", 7000), "\t\n\\\"'", "x"}
	want := map[uuid.UUID]string{}
	var ids []uuid.UUID
	var chunks []store.StreamChunk
	for i := range 400 {
		id := uuid.New()
		ids = append(ids, id)
		offset := 0
		var sb strings.Builder
		for j := range 3 {
			text := texts[(i+j)%len(texts)]
			if text == "" {
				continue
			}
			chunks = append(chunks, store.StreamChunk{MessageID: id, SessionID: sess, Offset: offset, Text: text, Fence: fence})
			offset += len(text)
			sb.WriteString(text)
		}
		if sb.Len() > 0 {
			want[id] = sb.String()
		}
	}
	// A chunk with no fence is stored; one whose fence is not its session's lease token
	// (another node took it) is left out.
	unfenced, stale := uuid.New(), uuid.New()
	ids = append(ids, unfenced, stale)
	want[unfenced] = "no fence"
	chunks = append(chunks,
		store.StreamChunk{MessageID: unfenced, SessionID: other, Text: "no fence"},
		store.StreamChunk{MessageID: stale, SessionID: other, Text: "stale", Fence: otherFence + 1})

	require.NoError(t, s.StreamLogSync(ctx, chunks, nil))
	got, err := s.StreamLogRead(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, want, got)

	// An interval whose answer was lost is sent again, with a chunk more: what is stored
	// stays, the new chunk follows it.
	more := store.StreamChunk{MessageID: ids[0], SessionID: sess, Offset: len(want[ids[0]]), Text: " and more", Fence: fence}
	require.NoError(t, s.StreamLogSync(ctx, append(chunks[:3:3], more), nil))
	want[ids[0]] += " and more"
	got, err = s.StreamLogRead(ctx, ids[:1])
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]string{ids[0]: want[ids[0]]}, got)

	// Removals alone, then with new chunks in the same statement.
	require.NoError(t, s.StreamLogSync(ctx, nil, ids[:200]))
	later := uuid.New()
	require.NoError(t, s.StreamLogSync(ctx, []store.StreamChunk{{MessageID: later, SessionID: sess, Text: "later", Fence: fence}}, ids[200:300]))
	got, err = s.StreamLogRead(ctx, append([]uuid.UUID{later}, ids...))
	require.NoError(t, err)
	for _, id := range ids[:300] {
		delete(want, id)
	}
	want[later] = "later"
	require.Equal(t, want, got)

	// Nothing at all is a statement that does nothing.
	require.NoError(t, s.StreamLogSync(ctx, nil, nil))

	counts, errs := statementCounts(t, reg)
	require.EqualValues(t, 5, counts["StreamLogSync"])
	require.Zero(t, errs["StreamLogSync"])
}

// Text the database will never take fails the statement with ErrInvalid, timed as an
// error, and nothing of it is stored; the connection it used serves the next.
func TestStreamLogSyncRefusedText(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s := storetest.New(t, func(c *pgxpool.Config) {
		c.ConnConfig.Tracer = store.NewMetrics(reg)
		c.MaxConns = 1
	})
	ctx := t.Context()
	sess, fence := leasedSession(t, s)
	good, bad := uuid.New(), uuid.New()
	for _, text := range []string{"nul \x00 byte", "invalid \xff utf-8"} {
		err := s.StreamLogSync(ctx, []store.StreamChunk{
			{MessageID: good, SessionID: sess, Text: "fine", Fence: fence},
			{MessageID: bad, SessionID: sess, Text: text, Fence: fence},
		}, nil)
		require.ErrorIs(t, err, store.ErrInvalid, "%q", text)
	}
	got, err := s.StreamLogRead(ctx, []uuid.UUID{good, bad})
	require.NoError(t, err)
	require.Empty(t, got)

	require.NoError(t, s.StreamLogSync(ctx, []store.StreamChunk{{MessageID: good, SessionID: sess, Text: "fine", Fence: fence}}, nil))
	got, err = s.StreamLogRead(ctx, []uuid.UUID{good})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]string{good: "fine"}, got)
	_, errs := statementCounts(t, reg)
	require.EqualValues(t, 2, errs["StreamLogSync"])
}

// A statement cut by its context's end returns the context's error, and the pool's
// next statement works.
func TestStreamLogSyncCancelled(t *testing.T) {
	t.Parallel()
	s := storetest.New(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	sess, fence := leasedSession(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	id := uuid.New()
	chunk := []store.StreamChunk{{MessageID: id, SessionID: sess, Text: "text", Fence: fence}}
	require.ErrorIs(t, s.StreamLogSync(ctx, chunk, nil), context.Canceled)
	require.NoError(t, s.StreamLogSync(t.Context(), chunk, nil))
	got, err := s.StreamLogRead(t.Context(), []uuid.UUID{id})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]string{id: "text"}, got)
}

// BenchmarkStreamLogSync is one interval of a node streaming to 3,000 sessions: what the
// statement costs the process (B/op) beside the database's time.
func BenchmarkStreamLogSync(b *testing.B) {
	s := storetest.New(b)
	ctx := context.Background()
	sessions := make([]uuid.UUID, 3000)
	for i := range sessions {
		sessions[i] = uuid.New()
	}
	texts := make([]string, 100)
	for i := range texts {
		texts[i] = fmt.Sprintf("tok%02d tok%02d ", i, i+1)
	}
	chunks := make([]store.StreamChunk, len(sessions))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j, sess := range sessions {
			chunks[j] = store.StreamChunk{MessageID: sess, SessionID: sess, Offset: i * 12, Text: texts[(i+j)%len(texts)]}
		}
		require.NoError(b, s.StreamLogSync(ctx, chunks, nil))
	}
}

// A chunk type made again (a migration run down and up) has another id: the statement
// that finds the type it knew gone looks it up again and stores the interval all the
// same.
func TestStreamLogSyncFindsItsTypeMadeAgain(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	sess, fence := leasedSession(t, s)
	first, second := uuid.New(), uuid.New()
	require.NoError(t, s.StreamLogSync(ctx, []store.StreamChunk{{MessageID: first, SessionID: sess, Text: "before", Fence: fence}}, nil))
	_, err := s.Pool().Exec(ctx, `DROP TYPE stream_log_chunk;
		CREATE TYPE stream_log_chunk AS (message_id uuid, start_offset integer, text text, session_id uuid, fence bigint)`)
	require.NoError(t, err)
	require.NoError(t, s.StreamLogSync(ctx, []store.StreamChunk{{MessageID: second, SessionID: sess, Text: "after", Fence: fence}}, nil))
	got, err := s.StreamLogRead(ctx, []uuid.UUID{first, second})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]string{first: "before", second: "after"}, got)
}

// Statements made at once each store their own chunks: one waits for no other's buffer.
func TestStreamLogSyncConcurrent(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	sess, fence := leasedSession(t, s)
	ids := make([]uuid.UUID, 8)
	errs := make(chan error, len(ids))
	for i := range ids {
		ids[i] = uuid.New()
		go func() {
			errs <- s.StreamLogSync(ctx, []store.StreamChunk{{MessageID: ids[i], SessionID: sess, Text: fmt.Sprint("chunk ", i), Fence: fence}}, nil)
		}()
	}
	for range ids {
		require.NoError(t, <-errs)
	}
	got, err := s.StreamLogRead(ctx, ids)
	require.NoError(t, err)
	require.Len(t, got, len(ids))
	for i, id := range ids {
		require.Equal(t, fmt.Sprint("chunk ", i), got[id])
	}
}
