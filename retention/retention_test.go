package retention_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/retention"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const day = 24 * time.Hour

type fixture struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	clock *clockwork.FakeClock
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.st.Pool().Exec(f.ctx, sql, args...)
	require.NoError(f.t, err)
}

// session makes a session of owner whose last run started at activeAt.
func (f *fixture) session(owner string, activeAt time.Time) uuid.UUID {
	id := uuid.New()
	f.exec(`INSERT INTO sessions (id, owner, created_at, updated_at, active_at) VALUES ($1, $2, $3, $3, $3)`, id, owner, activeAt)
	return id
}

// run makes an ended run of session with status, ended at endedAt, with a tool message
// whose output has n characters, a failed message, and a stream-log chunk.
func (f *fixture) run(session uuid.UUID, status string, endedAt time.Time, n int) (uuid.UUID, uuid.UUID) {
	f.t.Helper()
	id, tool := uuid.New(), uuid.New()
	var code, msg any
	if status != "done" {
		code, msg = "provider_error", "the provider said: quota exceeded for key sk-…"
	}
	f.exec(`INSERT INTO runs (id, session_id, owner, request_id, status, error_code, error_message, started_at, ended_at, last_activity_at)
		VALUES ($1, $2, '', $3, $4, $5, $6, $7, $7, $7)`, id, session, id.String(), status, code, msg, endedAt)
	var pos int64
	require.NoError(f.t, f.st.Pool().QueryRow(f.ctx, `SELECT COALESCE(max(position), 0) + 1 FROM messages WHERE session_id = $1`, session).Scan(&pos))
	f.exec(`INSERT INTO messages (id, session_id, run_id, position, role, status, tool_call_id, tool_name, tool_output, tool_status, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'tool', 'complete', 'c1', 'shell', $5, 'ok', $6, $6)`, tool, session, id, pos, strings.Repeat("x", n), endedAt)
	f.exec(`INSERT INTO messages (id, session_id, run_id, position, role, status, error_code, error_message, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 'assistant', 'error', 'provider_error', 'details', $5, $5)`, uuid.New(), session, id, pos+1, endedAt)
	f.exec(`INSERT INTO stream_log (message_id, start_offset, text) VALUES ($1, 0, 'remnant')`, tool)
	return id, tool
}

func (f *fixture) runState(id uuid.UUID) (pruned bool, code, msg *string) {
	f.t.Helper()
	var at *time.Time
	require.NoError(f.t, f.st.Pool().QueryRow(f.ctx, `SELECT details_pruned_at, error_code, error_message FROM runs WHERE id = $1`, id).Scan(&at, &code, &msg))
	return at != nil, code, msg
}

func (f *fixture) toolOutput(id uuid.UUID) string {
	f.t.Helper()
	var out string
	require.NoError(f.t, f.st.Pool().QueryRow(f.ctx, `SELECT tool_output FROM messages WHERE id = $1`, id).Scan(&out))
	return out
}

func (f *fixture) count(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.st.Pool().QueryRow(f.ctx, sql, args...).Scan(&n))
	return n
}

// A pass removes exactly what its settings make due, on the janitor's clock: details of
// done runs after Done, of failed ones after Failed (their error codes stay), tool output
// past the kept size, the stream log's remnants of pruned runs, old webhook events, and
// sessions idle past Sessions; nothing else, and nothing twice.
func TestPassRemovesExactlyWhatIsDue(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, ctx: context.Background(), st: storetest.New(t), clock: clockwork.NewFakeClockAt(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))}
	now := f.clock.Now()
	live := f.session("alice", now.Add(-time.Hour))
	oldDone, oldDoneTool := f.run(live, "done", now.Add(-8*day), 10_000)
	newDone, newDoneTool := f.run(live, "done", now.Add(-6*day), 10_000)
	shortDone, shortTool := f.run(live, "done", now.Add(-9*day), 100)
	oldFailed, oldFailedTool := f.run(live, "error", now.Add(-31*day), 10_000)
	youngFailed, _ := f.run(live, "cancelled", now.Add(-8*day), 10_000)
	idle := f.session("bob", now.Add(-100*day))
	f.run(idle, "done", now.Add(-100*day), 10)
	f.exec(`INSERT INTO webhook_outbox (id, owner, session_id, run_id, type, payload, created_at, next_attempt_at, delivered_at)
		VALUES ($1, 'alice', $2, $3, 'run.completed', '{}', $4, $4, $4), ($5, 'alice', $2, $3, 'run.completed', '{}', $6, $6, $6)`,
		uuid.New(), live, oldDone, now.Add(-8*day), uuid.New(), now.Add(-day))

	var mu sync.Mutex
	var deleted []uuid.UUID
	j := retention.New(retention.Config{
		Store: f.st, Clock: f.clock, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel),
		Done: retention.DefaultDone, Failed: retention.DefaultFailed, ToolOutput: 1000, Sessions: 90 * day, Batch: 2,
		DeleteSession: func(ctx context.Context, owner string, id uuid.UUID) error {
			mu.Lock()
			deleted = append(deleted, id)
			mu.Unlock()
			return f.st.SessionDelete(ctx, owner, id, f.clock.Now())
		},
	})
	c, err := j.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, retention.Counts{RunDetails: 4, ToolOutputs: 2, StreamChunks: 4, Sessions: 1, WebhookEvents: 1}, c,
		"old done, short done, old failed and idle's done run; two long outputs; one old event; bob's session")

	for _, id := range []uuid.UUID{oldDone, shortDone, oldFailed} {
		pruned, _, _ := f.runState(id)
		require.True(t, pruned, "%s", id)
	}
	for _, id := range []uuid.UUID{newDone, youngFailed} {
		pruned, _, msg := f.runState(id)
		require.False(t, pruned, "%s is not due", id)
		if id == youngFailed {
			require.NotNil(t, msg, "a young failure keeps its message")
		}
	}
	_, code, msg := f.runState(oldFailed)
	require.Equal(t, "provider_error", *code, "the code stays")
	require.Nil(t, msg, "the message goes")
	out := f.toolOutput(oldDoneTool)
	require.True(t, strings.HasPrefix(out, strings.Repeat("x", 1000)+"\n[9000 more characters removed after the retention period]"), out[990:])
	require.Len(t, f.toolOutput(oldFailedTool), 1000+len("\n[9000 more characters removed after the retention period]"))
	require.Len(t, f.toolOutput(newDoneTool), 10_000, "not due")
	require.Len(t, f.toolOutput(shortTool), 100, "short enough")
	require.Zero(t, f.count(`SELECT count(*) FROM stream_log WHERE message_id = $1`, oldDoneTool))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM stream_log WHERE message_id = $1`, newDoneTool))
	require.Zero(t, f.count(`SELECT count(*) FROM messages WHERE run_id = $1 AND error_message IS NOT NULL`, oldDone))
	require.Equal(t, 1, f.count(`SELECT count(*) FROM webhook_outbox`))
	require.Equal(t, []uuid.UUID{idle}, deleted)

	again, err := j.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, retention.Counts{}, again, "nothing twice")

	// A day on, the run that was 6 days old is due.
	f.clock.Advance(day + time.Minute)
	c, err = j.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.RunDetails)
	require.Len(t, f.toolOutput(newDoneTool), 1000+len("\n[9000 more characters removed after the retention period]"))
}

// With every setting at zero, nothing is ever removed.
func TestZeroKeepsEverything(t *testing.T) {
	t.Parallel()
	f := &fixture{t: t, ctx: context.Background(), st: storetest.New(t), clock: clockwork.NewFakeClock()}
	s := f.session("alice", f.clock.Now().Add(-1000*day))
	f.run(s, "done", f.clock.Now().Add(-1000*day), 10_000)
	f.run(s, "error", f.clock.Now().Add(-1000*day), 10_000)
	j := retention.New(retention.Config{Store: f.st, Clock: f.clock, DeleteSession: func(context.Context, string, uuid.UUID) error {
		t.Error("no session may be deleted")
		return nil
	}})
	c, err := j.Pass(f.ctx)
	require.NoError(t, err)
	require.Equal(t, retention.Counts{}, c)
}
