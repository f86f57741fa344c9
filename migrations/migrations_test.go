package migrations_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/migrations"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestUpIsIdempotent(t *testing.T) {
	// storetest's databases are cloned from a template that migrations.Up built.
	pool := storetest.NewPool(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, pool))
	require.NoError(t, migrations.Up(ctx, pool))

	var version int
	var dirty bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	require.EqualValues(t, migrations.Latest(), version)
	require.GreaterOrEqual(t, migrations.Latest(), uint(2))
	require.False(t, dirty)
	for _, table := range []string{"sessions", "runs", "messages"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&exists))
		require.True(t, exists, table)
	}
}

func TestUpOnAnEmptyDatabase(t *testing.T) {
	// A brand-new database (not from the template): drop the schema and migrate again.
	pool := storetest.NewPool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "DROP TABLE webhook_outbox, queued_messages, approval_rules, stream_log, workspaces, session_leases, messages, runs, sessions, schema_migrations; DROP FUNCTION session_position_max, session_request_ids; DROP TYPE stream_log_chunk")
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM sessions").Scan(&n))
	require.Zero(t, n)
}

func TestUpStopsOnCancelledContext(t *testing.T) {
	pool := storetest.NewPool(t, func(*pgxpool.Config) {})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, migrations.Up(ctx, pool), context.Canceled)
}

func TestHashIsStable(t *testing.T) {
	require.Equal(t, migrations.Hash(), migrations.Hash())
	require.Len(t, migrations.Hash(), 64)
}

// downTo migrates pool's database down to version, with the down files: what a database
// of that version's chatd held.
func downTo(t *testing.T, pool *pgxpool.Pool, version uint) {
	t.Helper()
	for v := migrations.Latest(); v > version; v-- {
		files, err := filepath.Glob(fmt.Sprintf("%06d_*.down.sql", v))
		require.NoError(t, err)
		if len(files) == 0 {
			continue // versions may have gaps (golang-migrate allows them)
		}
		require.Len(t, files, 1, "version %d", v)
		down, err := os.ReadFile(files[0])
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), string(down))
		require.NoError(t, err, files[0])
	}
	_, err := pool.Exec(t.Context(), "UPDATE schema_migrations SET version = $1", version)
	require.NoError(t, err)
}

// Runs stored before 000007 take their session's owner, so the limit of active runs
// counts them.
func TestRunsOwnerBackfill(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := t.Context()
	downTo(t, pool, 6)
	_, err := pool.Exec(ctx, `
		INSERT INTO sessions (id, owner, title, created_at, updated_at) VALUES
			('00000000-0000-0000-0000-000000000001', 'alice', '', now(), now()),
			('00000000-0000-0000-0000-000000000002', 'bob', '', now(), now());
		INSERT INTO runs (id, session_id, request_id, status, started_at, last_activity_at) VALUES
			('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-000000000001', 'r', 'running', now(), now()),
			('00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-000000000002', 'r', 'done', now(), now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
	rows, err := pool.Query(ctx, "SELECT owner FROM runs ORDER BY id")
	require.NoError(t, err)
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"alice", "bob"}, owners)
}

// Sessions written to before 000006 get the title their first user message would give
// them now, and a place in the conversation list.
func TestSessionsListBackfill(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := context.Background()
	downTo(t, pool, 5)
	long := strings.Repeat("word ", 30)
	_, err := pool.Exec(ctx, `
		INSERT INTO sessions (id, title, created_at, updated_at) VALUES
			('00000000-0000-0000-0000-000000000001', '', now(), now()),
			('00000000-0000-0000-0000-000000000002', '', now(), now()),
			('00000000-0000-0000-0000-000000000003', 'Named', now(), now()),
			('00000000-0000-0000-0000-000000000004', '', now(), now());
		INSERT INTO runs (id, session_id, request_id, status, started_at, last_activity_at) VALUES
			('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-000000000001', 'r', 'done', now(), now()),
			('00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-000000000002', 'r', 'done', now(), now()),
			('00000000-0000-0000-0000-0000000000a3', '00000000-0000-0000-0000-000000000003', 'r', 'done', now(), now());
		INSERT INTO messages (id, session_id, run_id, position, role, content, status, created_at, updated_at) VALUES
			(gen_random_uuid(), '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 1, 'user', E'  first\n\tquestion  ', 'complete', now(), now()),
			(gen_random_uuid(), '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 2, 'assistant', 'an answer', 'complete', now(), now()),
			(gen_random_uuid(), '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 3, 'user', 'second question', 'complete', now(), now()),
			(gen_random_uuid(), '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000a2', 1, 'user', '`+long+`', 'complete', now(), now()),
			(gen_random_uuid(), '00000000-0000-0000-0000-000000000003', '00000000-0000-0000-0000-0000000000a3', 1, 'user', 'not the name', 'complete', now(), now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))

	rows, err := pool.Query(ctx, "SELECT title, active_at IS NOT NULL FROM sessions ORDER BY id")
	require.NoError(t, err)
	type row struct {
		Title  string
		Listed bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{
		{chat.SessionTitle("  first\n\tquestion  "), true},
		{chat.SessionTitle(long), true},
		{"Named", true},
		{"", false},
	}, got)
}

// The sandboxes sessions have before 000011 are recorded as their workspaces, in use, on
// the node that made them; a deleted session has none.
func TestWorkspacesBackfill(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := t.Context()
	downTo(t, pool, 9)
	_, err := pool.Exec(ctx, `
		INSERT INTO sessions (id, title, created_at, updated_at, sandbox_id, sandbox_node, sandbox_used_at, deleted_at) VALUES
			('00000000-0000-0000-0000-000000000001', '', now(), now(), 'bwrap-1', 'node-a', now(), NULL),
			('00000000-0000-0000-0000-000000000002', '', now(), now(), 'local-2', NULL, NULL, NULL),
			('00000000-0000-0000-0000-000000000003', '', now(), now(), NULL, NULL, NULL, NULL),
			('00000000-0000-0000-0000-000000000004', '', now(), now(), NULL, NULL, NULL, now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))
	rows, err := pool.Query(ctx, "SELECT sandbox_id, node, released_at IS NULL FROM workspaces ORDER BY sandbox_id")
	require.NoError(t, err)
	type row struct {
		SandboxID, Node string
		InUse           bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{{"bwrap-1", "node-a", true}, {"local-2", "", true}}, got)
}

// 000010 moves every session's lease into a row of its own, holder, expiry and token
// as they were, and its down migration moves them back.
func TestLeaseRowsBackfill(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := t.Context()
	downTo(t, pool, 9)
	_, err := pool.Exec(ctx, `
		INSERT INTO sessions (id, owner, title, created_at, updated_at, lease_node, lease_addr, lease_expires_at, lease_token) VALUES
			('00000000-0000-0000-0000-000000000001', 'alice', '', now(), now(), 'a', 'a:1', '2030-01-01T00:00:00Z', 7),
			('00000000-0000-0000-0000-000000000002', 'bob', '', now(), now(), NULL, NULL, NULL, 3),
			('00000000-0000-0000-0000-000000000003', 'carol', '', now(), now(), NULL, NULL, NULL, 0)`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))

	type lease struct {
		Node    *string
		Expires *time.Time
		Token   int64
	}
	read := func(sql string) []lease {
		rows, err := pool.Query(ctx, sql)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[lease])
		require.NoError(t, err)
		return got
	}
	a, exp := "a", time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	want := []lease{{&a, &exp, 7}, {nil, nil, 3}, {nil, nil, 0}}
	got := read("SELECT node, expires_at, token FROM session_leases ORDER BY session_id")
	for i := range got {
		if got[i].Expires != nil {
			got[i].Expires = ptr(got[i].Expires.UTC())
		}
	}
	require.Equal(t, want, got)

	downTo(t, pool, 9)
	got = read("SELECT lease_node, lease_expires_at, lease_token FROM sessions ORDER BY id")
	for i := range got {
		if got[i].Expires != nil {
			got[i].Expires = ptr(got[i].Expires.UTC())
		}
	}
	require.Equal(t, want, got, "and back")
}

func ptr[T any](v T) *T { return &v }

// 000018 turns each transcript into a tree: a linear one is one path ending at its last
// message; a retried run's answer and its retry's hang under the same user message, and
// what came after the retry follows the retry. The retry's answer is on the active path.
func TestBranchesBackfill(t *testing.T) {
	pool := storetest.NewPool(t)
	ctx := t.Context()
	downTo(t, pool, 17)
	_, err := pool.Exec(ctx, `
		INSERT INTO sessions (id, title, created_at, updated_at) VALUES
			('00000000-0000-0000-0000-000000000001', '', now(), now()),
			('00000000-0000-0000-0000-000000000002', '', now(), now()),
			('00000000-0000-0000-0000-000000000003', '', now(), now());
		INSERT INTO runs (id, session_id, owner, request_id, status, started_at, last_activity_at) VALUES
			('00000000-0000-0000-0000-0000000000a1', '00000000-0000-0000-0000-000000000001', '', 'r1', 'done', now(), now()),
			('00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-000000000001', '', 'r2', 'done', now(), now()),
			('00000000-0000-0000-0000-0000000000b1', '00000000-0000-0000-0000-000000000002', '', 'r1', 'error', now(), now()),
			('00000000-0000-0000-0000-0000000000b2', '00000000-0000-0000-0000-000000000002', '', 'r2', 'error', now(), now()),
			('00000000-0000-0000-0000-0000000000b3', '00000000-0000-0000-0000-000000000002', '', 'r3', 'done', now(), now()),
			('00000000-0000-0000-0000-0000000000b4', '00000000-0000-0000-0000-000000000002', '', 'r4', 'done', now(), now());
		UPDATE runs SET retry_of = '00000000-0000-0000-0000-0000000000b1', superseded_by = '00000000-0000-0000-0000-0000000000b3'
			WHERE id = '00000000-0000-0000-0000-0000000000b2';
		UPDATE runs SET superseded_by = '00000000-0000-0000-0000-0000000000b2' WHERE id = '00000000-0000-0000-0000-0000000000b1';
		UPDATE runs SET retry_of = '00000000-0000-0000-0000-0000000000b2' WHERE id = '00000000-0000-0000-0000-0000000000b3';
		INSERT INTO messages (id, session_id, run_id, position, role, content, status, created_at, updated_at) VALUES
			('00000000-0000-0000-0000-000000000a01', '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 1, 'user', 'q1', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000a02', '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 2, 'assistant', 'a1', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000a03', '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a1', 3, 'tool', '', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000a04', '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a2', 4, 'user', 'q2', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000a05', '00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-0000000000a2', 5, 'assistant', 'a2', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000b01', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b1', 1, 'user', 'q', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000b02', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b1', 2, 'assistant', 'first try', 'error', now(), now()),
			('00000000-0000-0000-0000-000000000b03', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b2', 3, 'assistant', 'second try', 'error', now(), now()),
			('00000000-0000-0000-0000-000000000b04', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b3', 4, 'assistant', 'third try', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000b05', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b3', 5, 'assistant', 'more', 'complete', now(), now()),
			('00000000-0000-0000-0000-000000000b06', '00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-0000000000b4', 6, 'user', 'next', 'complete', now(), now())`)
	require.NoError(t, err)
	require.NoError(t, migrations.Up(ctx, pool))

	rows, err := pool.Query(ctx, "SELECT id::text, COALESCE(parent_id::text, '') FROM messages ORDER BY session_id, position")
	require.NoError(t, err)
	type edge struct{ ID, Parent string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[edge])
	require.NoError(t, err)
	m := func(s string) string { return "00000000-0000-0000-0000-000000000" + s }
	require.Equal(t, []edge{
		{m("a01"), ""}, {m("a02"), m("a01")}, {m("a03"), m("a02")}, {m("a04"), m("a03")}, {m("a05"), m("a04")},
		{m("b01"), ""},
		{m("b02"), m("b01")}, // the first try, the second and the third all answer q
		{m("b03"), m("b01")},
		{m("b04"), m("b01")},
		{m("b05"), m("b04")}, // the third try goes on
		{m("b06"), m("b05")}, // and the next question follows it
	}, got)

	rows, err = pool.Query(ctx, "SELECT COALESCE(active_leaf::text, '') FROM sessions ORDER BY id")
	require.NoError(t, err)
	leaves, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{m("a05"), m("b06"), ""}, leaves)
}
