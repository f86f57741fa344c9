package store_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// batchCounter counts the batches the pool sends and the statements sent alone.
type batchCounter struct{ batches, alone atomic.Int64 }

func (c *batchCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.alone.Add(1)
	return ctx
}
func (c *batchCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *batchCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}
func (c *batchCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *batchCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// Writes made at once by many sessions' writers go out in batches (fewer round trips
// than statements), and each gets its own answer: a statement the database refuses
// (here a position taken) fails alone, and everything else in its batch is stored.
func TestGroupedWritesAnswerEachOnItsOwn(t *testing.T) {
	counter := &batchCounter{}
	s, b := setup(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	run, _ := startRun(t, s, b, "r1", 1)

	const n = 64
	clash := 17 // takes the user message's position
	msgs := make([]chat.Message, n)
	for i := range msgs {
		pos := int64(i + 2)
		if i == clash {
			pos = 1
		}
		msgs[i] = chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: pos, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	}
	counter.batches.Store(0)
	counter.alone.Store(0)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range msgs {
		wg.Go(func() {
			<-start
			errs[i] = s.MessageInsert(b.ctx, msgs[i])
		})
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		if i == clash {
			require.ErrorIs(t, err, store.ErrConflict)
			continue
		}
		require.NoError(t, err, "message %d", i)
	}
	require.Equal(t, n, count(t, s, b, "SELECT count(*) FROM messages WHERE session_id = $1", b.session.ID),
		"the user message and every insert but the clash, once each")
	require.Positive(t, counter.batches.Load(), "some inserts went out together")
	t.Logf("%d inserts: %d batches, %d statements alone", n, counter.batches.Load(), counter.alone.Load())
}

// A grouped QueryRow that finds no row answers ErrNoRows for itself (its caller's
// ErrNotFound), without failing, or repeating, the writes batched with it.
func TestGroupedRowNotFoundIsItsOwn(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	var wg sync.WaitGroup
	start := make(chan struct{})
	var missing error
	inserted := make([]error, 16)
	for i := range inserted {
		wg.Go(func() {
			<-start
			m := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: int64(i + 2), Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
			inserted[i] = s.MessageInsert(b.ctx, m)
		})
	}
	wg.Go(func() {
		<-start
		gone := run
		gone.ID = uuid.New()
		gone.Status = chat.RunDone
		missing = s.RunUpdate(b.ctx, gone, chat.RunRunning)
	})
	close(start)
	wg.Wait()
	require.ErrorIs(t, missing, store.ErrNotFound)
	for _, err := range inserted {
		require.NoError(t, err)
	}
	require.Equal(t, 17, count(t, s, b, "SELECT count(*) FROM messages WHERE session_id = $1", b.session.ID))
}

// A grouped write whose context ends while it waits for a batch's place leaves the
// queue with the context's error, and is never sent; the writes queued with it are.
func TestQueuedGroupedWriteHonoursItsContext(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	msg := func(pos int64) chat.Message {
		return chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: pos, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	}
	hold := store.HoldGroup(s)
	ctx, cancel := context.WithCancel(b.ctx)
	given, kept := msg(2), msg(3)
	gaveUp, stored := make(chan error, 1), make(chan error, 1)
	go func() { gaveUp <- s.MessageInsert(ctx, given) }()
	<-hold.Queued
	go func() { stored <- s.MessageInsert(b.ctx, kept) }()
	<-hold.Queued

	cancel()
	require.ErrorIs(t, <-gaveUp, context.Canceled, "it gave up while queued, without waiting for a batch")
	require.Equal(t, 1, hold.Len(), "it left the queue")
	hold.Release()
	require.NoError(t, <-stored)

	_, err := s.MessageGet(b.ctx, given.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the write that gave up was never sent")
	_, err = s.MessageGet(b.ctx, kept.ID)
	require.NoError(t, err)
}
