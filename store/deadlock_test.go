package store_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// deadlockIterations is how many batches TestRenewalsAndGroupedWritesDoNotDeadlock
// makes: CHATD_DEADLOCK_ITERATIONS raises it.
func deadlockIterations(t *testing.T) int {
	n := 1000
	if v := os.Getenv("CHATD_DEADLOCK_ITERATIONS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "CHATD_DEADLOCK_ITERATIONS")
	}
	return n
}

// deadlockCounter counts the statements the server aborted as deadlocked (40P01), alone
// or in a batch.
type deadlockCounter struct{ n atomic.Int64 }

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

func (c *deadlockCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *deadlockCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	if isDeadlock(d.Err) {
		c.n.Add(1)
	}
}

func (c *deadlockCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *deadlockCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if isDeadlock(d.Err) {
		c.n.Add(1)
	}
}

func (c *deadlockCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// leased is one session of a node, with what its actor would write next.
type leased struct {
	id    uuid.UUID
	token int64
	run   chat.Run
	open  chat.Message // a streaming segment
	next  int64        // the next position
}

// Grouped writes hold their row locks on several sessions until their batch commits,
// while the node's renewal extends the leases of the same sessions, in another order: the
// two must never wait on each other in a cycle (PostgreSQL would abort one of them as
// deadlocked, 40P01). Each iteration is one batch of fenced writes (an insert, an
// update of a segment or of a run, a run's start) over several sessions in a random
// order, sent while a renewal of every session runs.
func TestRenewalsAndGroupedWritesDoNotDeadlock(t *testing.T) {
	t.Parallel()
	dl := &deadlockCounter{}
	s := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = dl })
	ctx := context.Background()
	now := chat.Timestamp(time.Now())
	const sessions = 12
	ls := make([]*leased, sessions)
	held := map[uuid.UUID]int64{}
	for i := range ls {
		id := uuid.New()
		_, err := s.SessionCreate(ctx, chat.Session{ID: id, Owner: "u", CreatedAt: now})
		require.NoError(t, err)
		_, l, err := s.LeaseAcquire(ctx, id, "a", "a:1", time.Hour)
		require.NoError(t, err)
		st := &leased{id: id, token: l.Token, next: 1}
		fctx := store.WithFence(ctx, st.token)
		st.run = chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r0", Status: chat.RunRunning, StartedAt: now, LastActivityAt: now}
		require.NoError(t, s.RunStart(fctx, st.run, st.message(chat.RoleUser, now), 0))
		st.open = st.message(chat.RoleAssistant, now)
		require.NoError(t, s.MessageInsert(fctx, st.open))
		ls[i] = st
		held[id] = l.Token
	}

	iterations := deadlockIterations(t)
	var deadlocks, failures int
	var first error
	record := func(err error) {
		if err == nil {
			return
		}
		if isDeadlock(err) {
			deadlocks++
		} else {
			failures++
		}
		if first == nil {
			first = err
		}
	}
	for it := range iterations {
		at := now.Add(time.Duration(it+1) * time.Millisecond)
		hold := store.HoldGroup(s)
		order := rand.Perm(sessions)[:4+rand.IntN(sessions-3)]
		errs := make([]error, len(order))
		var wg sync.WaitGroup
		for k, i := range order {
			write := ls[i].write(s, it, at)
			wg.Go(func() { errs[k] = write() })
			<-hold.Queued
		}
		// The renewal and the batch go out together.
		start := make(chan struct{})
		var renewed []store.HeldLease
		var renewErr error
		wg.Go(func() {
			<-start
			renewed, renewErr = s.LeaseRenew(ctx, "a", held, time.Hour)
		})
		wg.Go(func() {
			<-start
			hold.Release()
		})
		close(start)
		wg.Wait()
		for _, err := range append(errs, renewErr) {
			record(err)
		}
		if renewErr == nil && len(renewed) != sessions {
			record(fmt.Errorf("iteration %d: %d leases renewed, not %d", it, len(renewed), sessions))
		}
	}
	// A batch aborted as deadlocked is made again statement by statement, which hides
	// it from the writers: the tracer counts it.
	t.Logf("%d iterations: %d statements or batches aborted as deadlocked (%d renewals among them); %d other failures",
		iterations, dl.n.Load(), deadlocks, failures)
	require.NoError(t, first, "%d deadlocks and %d other failures in %d iterations", deadlocks, failures, iterations)
	require.Zero(t, dl.n.Load(), "batches aborted as deadlocked")
}

func (st *leased) message(role chat.Role, at time.Time) chat.Message {
	m := chat.Message{ID: uuid.New(), SessionID: st.id, RunID: &st.run.ID, Position: st.next, Role: role, Status: chat.MessageStreaming, CreatedAt: at, UpdatedAt: at}
	if role == chat.RoleUser {
		m.Content, m.Status = "go", chat.MessageComplete
	}
	st.next++
	return m
}

// write returns one fenced write of the session's actor, chosen at random, and moves
// st on as if it succeeded (the test fails otherwise).
func (st *leased) write(s *store.Store, it int, at time.Time) func() error {
	ctx := store.WithFence(context.Background(), st.token)
	switch rand.IntN(4) {
	case 0:
		m := st.message(chat.RoleAssistant, at)
		st.open = m
		return func() error { return s.MessageInsert(ctx, m) }
	case 1:
		m := st.open
		m.Content, m.UpdatedAt = fmt.Sprintf("text %d", it), at
		st.open = m
		return func() error { return s.MessageUpdate(ctx, m, chat.MessageStreaming) }
	case 2:
		r := st.run
		r.LastActivityAt = at
		st.run = r
		return func() error { return s.RunUpdate(ctx, r, chat.RunRunning) }
	}
	r := chat.Run{ID: uuid.New(), SessionID: st.id, RequestID: fmt.Sprintf("r%d", it+1), Status: chat.RunRunning, StartedAt: at, LastActivityAt: at}
	st.run = r
	user := st.message(chat.RoleUser, at)
	return func() error { return s.RunStart(ctx, r, user, 0) }
}
