package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

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
	_, err := pool.Exec(ctx, "DROP TABLE messages, runs, sessions, schema_migrations")
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
