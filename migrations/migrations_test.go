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
	_, err := pool.Exec(ctx, "DROP TABLE queued_messages, approval_rules, stream_log, workspaces, session_leases, messages, runs, sessions, schema_migrations; DROP FUNCTION session_position_max, session_request_ids")
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
