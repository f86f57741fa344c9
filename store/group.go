package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chatd/chatd/queries"
)

// Group commit. The actors' writes (a run's start, a segment's or tool call's insert and
// update, a run's status and end) are single statements, each on its own session's
// rows, made by many sessions at once. Sent one by one, each holds a pool connection for
// a round trip: with a slow database (200 ms away) and 100 runs starting in a second,
// 16 connections carry 80 statements a second, and runs queue for the pool. groupDB
// sends the statements that arrive while others are out together, as one batch: one
// round trip and one commit for all of them, on one connection.
//
// A batch is one implicit transaction. When any statement in it fails, all of them were
// rolled back, and each is made again on its own, so one statement's error (a
// conflict, a lock timeout) is that statement's alone. Statements that are not writes
// of an actor (reads, the lease's statements, transactions) do not come here.

// groupMaxBatch bounds the statements of one batch.
const groupMaxBatch = 256

// groupTimeout bounds one batch's round trip (the callers' own deadlines are the
// statements' context when one is made alone).
const groupTimeout = 10 * time.Second

// groupDB is the queries.DBTX of grouped writes: Exec and QueryRow wait for their batch;
// Query is not grouped.
type groupDB struct {
	pool *pgxpool.Pool
	max  int // batches in flight at most

	mu       sync.Mutex
	queue    []*groupReq // the urgent ones first
	urgent   int
	inFlight int

	// queued, when set (tests only), is called after a request joins the queue.
	queued func()
}

type groupReq struct {
	ctx  context.Context
	sql  string
	args []any
	dest []any // for QueryRow: where its row goes; nil for Exec
	row  bool
	tag  pgconn.CommandTag
	err  error
	done chan struct{}
}

func newGroupDB(pool *pgxpool.Pool) *groupDB {
	// Most of the pool: a few connections stay for reads and what is not grouped.
	return &groupDB{pool: pool, max: max(int(pool.Config().MaxConns)*3/4, 1)}
}

var _ queries.DBTX = (*groupDB)(nil)

func (g *groupDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r := &groupReq{ctx: ctx, sql: sql, args: args}
	g.do(r)
	return r.tag, r.err
}

func (g *groupDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return g.pool.Query(ctx, sql, args...)
}

func (g *groupDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return groupRow{g, ctx, sql, args}
}

type groupRow struct {
	g    *groupDB
	ctx  context.Context
	sql  string
	args []any
}

func (r groupRow) Scan(dest ...any) error {
	req := &groupReq{ctx: r.ctx, sql: r.sql, args: r.args, dest: dest, row: true}
	r.g.do(req)
	return req.err
}

// do queues r and waits for its result. A caller that finds a batch's place free sends
// what is queued itself; the batches after it go out from their own goroutines. A
// request whose ctx ends while it is still queued leaves the queue with ctx's error:
// nothing of it was sent. Once taken into a batch its outcome is the batch's, whatever
// its ctx: the batch is one transaction, which commits or fails as a whole.
func (g *groupDB) do(r *groupReq) {
	if err := r.ctx.Err(); err != nil {
		r.err = err
		return
	}
	r.done = make(chan struct{})
	g.mu.Lock()
	if r.row {
		// A row read is a run's start, which a person waits for (chat.started, the
		// ack, the first token); the writes stored behind can wait a batch more.
		g.queue = slices.Insert(g.queue, g.urgent, r)
		g.urgent++
	} else {
		g.queue = append(g.queue, r)
	}
	queued := g.queued
	if g.inFlight >= g.max {
		g.mu.Unlock()
		if queued != nil {
			queued()
		}
		g.wait(r) // a batch in flight sends it next
		return
	}
	g.inFlight++
	batch := g.take()
	g.mu.Unlock()
	g.send(batch)
	g.wait(r) // in batch, or, behind a full one, in the next
}

// wait waits for r's batch, or for r's ctx while r is still queued.
func (g *groupDB) wait(r *groupReq) {
	select {
	case <-r.done:
		return
	case <-r.ctx.Done():
	}
	g.mu.Lock()
	if i := slices.Index(g.queue, r); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		if i < g.urgent {
			g.urgent--
		}
		g.mu.Unlock()
		r.err = r.ctx.Err()
		return
	}
	g.mu.Unlock()
	<-r.done // taken into a batch already
}

// take removes up to groupMaxBatch queued requests. g.mu is held.
func (g *groupDB) take() []*groupReq {
	n := min(len(g.queue), groupMaxBatch)
	g.urgent = max(g.urgent-n, 0)
	batch := g.queue[:n:n]
	g.queue = g.queue[n:]
	if len(g.queue) == 0 {
		g.queue = nil
	}
	return batch
}

// send makes batch, then hands the batch's place to what queued meanwhile.
func (g *groupDB) send(batch []*groupReq) {
	g.exec(batch)
	g.mu.Lock()
	if len(g.queue) == 0 {
		g.inFlight--
		g.mu.Unlock()
		return
	}
	next := g.take()
	g.mu.Unlock()
	go g.send(next)
}

func (g *groupDB) exec(batch []*groupReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) == 1 {
		g.alone(batch[0])
		return
	}
	b := &pgx.Batch{}
	for _, r := range batch {
		q := b.Queue(r.sql, r.args...)
		// The callbacks keep each statement's own answer (a row not found is its
		// caller's ErrNoRows) and never fail the batch: only the server decides what
		// was committed.
		if r.row {
			q.QueryRow(func(row pgx.Row) error { r.err = row.Scan(r.dest...); return nil })
		} else {
			q.Exec(func(tag pgconn.CommandTag) error { r.tag = tag; return nil })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	err := g.pool.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
	case errors.As(err, &pgErr):
		// The server refused a statement: the implicit transaction was rolled back, so
		// nothing of the batch was committed. Each is made again on its own, and gets
		// its own answer.
		for _, r := range batch {
			r.tag, r.err = pgconn.CommandTag{}, nil
			if r.ctx.Err() != nil {
				r.err = r.ctx.Err()
				continue
			}
			g.alone(r)
		}
	default:
		// The connection failed: whether the batch committed is unknown, as for a
		// statement whose answer was lost. Each caller finds out, as it would then.
		for _, r := range batch {
			r.tag, r.err = pgconn.CommandTag{}, err
		}
	}
}

// alone makes one statement on its own, with its caller's context.
func (g *groupDB) alone(r *groupReq) {
	if r.row {
		r.err = g.pool.QueryRow(r.ctx, r.sql, r.args...).Scan(r.dest...)
		return
	}
	r.tag, r.err = g.pool.Exec(r.ctx, r.sql, r.args...)
}

// PrepareHot prepares the statements of a run's start and of the actors' writes on a new
// connection (pgxpool's AfterConnect): each statement a connection has not seen costs a
// round trip to prepare before its first use, which with a distant database would double
// a run's time to its first token on every connection the pool opens. Preparing them
// here moves that to when the connection is made.
func PrepareHot(ctx context.Context, conn *pgx.Conn) error {
	for _, sql := range queries.HotStatements {
		_, err := conn.Prepare(ctx, sql, sql)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			// The schema is not migrated yet (the connection that migrates it): its
			// statements are prepared at their first use instead.
			return nil
		}
		if err != nil {
			return fmt.Errorf("prepare %s: %w", StatementName(sql), err)
		}
	}
	return nil
}
