package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/migrations"
	"github.com/chatd/chatd/store"
)

// database is the PostgreSQL pool as a service. Start opens the pool, checks that the
// database answers, applies the migrations and adds the pool's statistics to /metrics;
// Stop takes them off and closes the pool.
type database struct {
	url      string // for errors, with the password hidden
	poolCfg  *pgxpool.Config
	registry prometheus.Registerer

	pool  *pgxpool.Pool
	stats *poolCollector
	// store is filled in by Start; Store hands out its address beforehand.
	store store.Store
	// webhooks: the store queues webhook events (store.EnableWebhooks).
	webhooks bool
}

// newDatabase parses url (a configuration error shows before anything connects). The
// pool's statements are timed into reg, and its statistics join reg while it is open.
func newDatabase(url string, reg prometheus.Registerer) (*database, error) {
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		poolCfg.MaxConns = 16
	}
	poolCfg.ConnConfig.Tracer = store.NewMetrics(reg)
	poolCfg.AfterConnect = store.AfterConnect
	return &database{url: url, poolCfg: poolCfg, registry: reg}, nil
}

// Store returns the store on the pool, for wiring: it may be handed to the parts built
// before the database starts, and used once it has started. Every service added after
// the database may use it in its Start; nothing serves a request before then.
func (d *database) Store() *store.Store { return &d.store }

// Start opens the pool; it leaves nothing open when it fails.
func (d *database) Start(ctx context.Context) error {
	pool, err := pgxpool.NewWithConfig(ctx, d.poolCfg)
	if err != nil {
		return fmt.Errorf("open database pool: %w", err)
	}
	if err := d.prepare(ctx, pool); err != nil {
		pool.Close()
		return err
	}
	stats := newPoolCollector(pool)
	if err := d.registry.Register(stats); err != nil {
		pool.Close()
		return fmt.Errorf("register the pool's metrics: %w", err)
	}
	d.pool, d.stats = pool, stats
	d.store = *store.New(pool)
	if d.webhooks {
		d.store.EnableWebhooks()
	}
	return nil
}

// prepare checks that the database answers and brings its schema up to date.
func (d *database) prepare(ctx context.Context, pool *pgxpool.Pool) error {
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := store.New(pool).Ping(pingCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to the database at %s: %w", redactURL(d.url), err)
	}
	return migrations.Up(ctx, pool)
}

// Stop closes the pool. It waits for connections in use to come back, so it comes after
// everything that uses them has stopped.
func (d *database) Stop(context.Context) error {
	d.registry.Unregister(d.stats)
	d.pool.Close()
	return nil
}

// redactURL hides the password of a database URL for logs.
func redactURL(raw string) string {
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	c := cfg.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
