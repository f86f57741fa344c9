package hub_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store/storetest"
)

// countStatements counts the statements sent on a pool.
type countStatements struct{ n atomic.Int64 }

func (c *countStatements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countStatements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// A thousand hellos for sessions that do not exist or are another user's, on a node that
// holds leases as every chatd does: each is refused as "no such session", costs one
// statement, takes no lease, and leaves no actor behind. Each used to leave an actor
// resident for the idle timeout, after two to four statements (a cheap attack on memory
// and on the database).
func TestRefusedHellosLeaveNothingResident(t *testing.T) {
	t.Parallel()
	counter := &countStatements{}
	st := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	h, err := hub.New(conversation.Config{
		Store: st, Agent: script.New(), Clock: clockwork.NewFakeClock(),
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Lease:  &conversation.LeaseConfig{Node: func() string { return "a" }, Addr: func() string { return "a:1" }, TTL: time.Minute},
	}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Shutdown(context.Background())) })
	ctx := testCtx(t)
	var alices []uuid.UUID
	for range 10 {
		s, err := st.SessionCreate(ctx, chat.Session{ID: uuid.New(), Owner: "alice", CreatedAt: time.Now()})
		require.NoError(t, err)
		alices = append(alices, s.ID)
	}

	const hellos = 1000
	before := counter.n.Load()
	for i := range hellos {
		id := uuid.New() // none has it
		if i%2 == 1 {
			id = alices[i%len(alices)]
		}
		a, _, err := h.Hello(ctx, id, conversation.HelloRequest{Owner: "mallory", Subscriber: newSub()})
		if i%2 == 1 {
			require.ErrorIs(t, err, conversation.ErrNotYours)
		} else {
			require.ErrorIs(t, err, conversation.ErrNoSession)
		}
		select {
		case <-a.Done():
		case <-ctx.Done():
			t.Fatalf("hello %d left its actor running", i)
		}
	}
	require.Zero(t, h.Len(), "no actor is left")
	require.LessOrEqual(t, counter.n.Load()-before, int64(hellos), "at most one statement a hello")
	var held int
	require.NoError(t, st.Pool().QueryRow(ctx, "SELECT count(*) FROM session_leases WHERE node IS NOT NULL").Scan(&held))
	require.Zero(t, held, "no lease was taken on another user's session")
}
