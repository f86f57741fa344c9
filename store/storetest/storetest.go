// Package storetest gives tests a real PostgreSQL database of their own.
//
// Each call clones a fresh database from a template that has every migration applied, so
// a test starts from the real schema in a few milliseconds and cannot see another test's
// rows. The server comes from CHATD_TEST_DATABASE_URL or DATABASE_URL (`make test` starts
// a private one and sets DATABASE_URL). The template is built once per migration set and
// shared by every test process; an advisory lock keeps parallel packages from building it
// twice. Databases are dropped when the test ends.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/internal/delayproxy"
	"github.com/chatd/chatd/migrations"
	"github.com/chatd/chatd/store"
)

// ServerURL returns the URL of the test server, failing the test when none is configured.
func ServerURL(t testing.TB) string {
	t.Helper()
	for _, k := range []string{"CHATD_TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(k); u != "" {
			return u
		}
	}
	t.Fatal("no PostgreSQL for tests: run `make test` (it starts a private server) or set CHATD_TEST_DATABASE_URL")
	return ""
}

// NewURL creates a fresh migrated database and returns its URL. The database is dropped
// when the test ends.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	base := ServerURL(t)
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		t.Fatalf("parse test database URL: %v", err)
	}
	tmpl, err := ensureTemplate(ctx, base, cfg)
	if err != nil {
		t.Fatalf("prepare template database: %v", err)
	}

	name := "chatd_test_" + randomHex(8)
	if err := adminExec(ctx, cfg, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := adminExec(ctx, cfg, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return withDatabase(base, name)
}

// NewPool returns a pool on a fresh migrated database, closed when the test ends.
// Options edit the pool's configuration (add a tracer, say) before it connects.
func NewPool(t testing.TB, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(t))
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	cfg.MaxConns = 4
	// Values are sent as chatd sends them (its statements are prepared on their first
	// use here, which counts no statement more).
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		store.RegisterTypes(conn.TypeMap())
		return nil
	}
	for _, o := range opts {
		o(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// New returns a Store on a fresh migrated database.
func New(t testing.TB, opts ...func(*pgxpool.Config)) *store.Store {
	t.Helper()
	return store.New(NewPool(t, opts...))
}

// ExpireLease lets session id's lease run out at once: its expiry moves into the past by
// the database's clock, which is the clock leases expire by. Its holder and token stay,
// as for a node that stopped renewing. It fails the test when the session has no lease
// row.
func ExpireLease(t testing.TB, st *store.Store, id uuid.UUID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag, err := st.Pool().Exec(ctx, "UPDATE session_leases SET expires_at = now() - interval '1 second' WHERE session_id = $1", id)
	if err != nil {
		t.Fatalf("expire the lease of session %s: %v", id, err)
	}
	if tag.RowsAffected() != 1 {
		t.Fatalf("expire the lease of session %s: no lease row", id)
	}
}

// ensureTemplate returns the name of the migrated template database, building it first
// when no test process has yet.
func ensureTemplate(ctx context.Context, base string, cfg *pgx.ConnConfig) (string, error) {
	name := "chatd_tmpl_" + migrations.Hash()[:16]

	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", cfg.Database, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext('chatd-test-template'))"); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	// Unlocks too when the connection closes.
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock(hashtext('chatd-test-template'))")

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}

	// Build under another name and rename when done, so a build that dies half way never
	// leaves a template that looks finished.
	build := name + "_build"
	if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", build)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+build); err != nil {
		return "", err
	}
	pool, err := pgxpool.New(ctx, withDatabase(base, build))
	if err != nil {
		return "", err
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", build, name)); err != nil {
		return "", err
	}
	return name, nil
}

func adminExec(ctx context.Context, cfg *pgx.ConnConfig, sql string) error {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns base with its database replaced by name, keeping everything else
// (host or socket, credentials, TLS settings).
func withDatabase(base, name string) string {
	if u, err := url.Parse(base); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	// keyword=value form: a later dbname overrides an earlier one.
	return base + " dbname=" + name
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Delayed is a pool option (for New and NewPool) that connects through a TCP proxy
// delaying everything sent to PostgreSQL by delay, so every round trip takes that much
// longer: a real slow database. The proxy is closed when the test ends, after the pool.
func Delayed(t testing.TB, delay time.Duration) func(*pgxpool.Config) {
	return func(cfg *pgxpool.Config) {
		t.Helper()
		cc := cfg.ConnConfig
		if cc.Host == "" || strings.HasPrefix(cc.Host, "/") {
			t.Fatalf("the test database at %q is not reached over TCP: no proxy can be put in front of it", cc.Host)
		}
		p, err := delayproxy.Start(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), delay)
		if err != nil {
			t.Fatalf("start a delaying proxy: %v", err)
		}
		t.Cleanup(p.Close)
		host, port, err := net.SplitHostPort(p.Addr())
		if err != nil {
			t.Fatalf("proxy address: %v", err)
		}
		n, _ := strconv.Atoi(port)
		cc.Host, cc.Port = host, uint16(n)
		cc.Fallbacks = nil
	}
}
