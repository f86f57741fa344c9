package conversation_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// statementCounter counts the SQL statements sent on a pool.
type statementCounter struct {
	mu    sync.Mutex
	stmts []string
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	first, _, _ := strings.Cut(strings.TrimSpace(d.SQL), "\n")
	c.stmts = append(c.stmts, first)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Statements sent in a batch (the store groups writes made at once) count one by one.
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.TraceQueryStart(ctx, conn, pgx.TraceQueryStartData{SQL: d.SQL})
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *statementCounter) reset() {
	c.mu.Lock()
	c.stmts = nil
	c.mu.Unlock()
}

func (c *statementCounter) taken() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.stmts...)
}

func startActor(t *testing.T, st conversation.Store, agent conversation.Agent) *conversation.Actor {
	t.Helper()
	return startActorWithClock(t, st, agent, clockwork.NewFakeClock())
}

func startActorWithClock(t *testing.T, st conversation.Store, agent conversation.Agent, clock clockwork.Clock, edit ...func(*conversation.Config)) *conversation.Actor {
	t.Helper()
	cfg := conversation.Config{
		Store:  st,
		Agent:  agent,
		Clock:  clock,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
	}
	for _, e := range edit {
		e(&cfg)
	}
	a := conversation.Start(cfg, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	return a
}

// The storage rule: a run's writes grow with its segments and tool calls, never with its
// tokens. A 1000-word reply with one tool call costs what a 10-word one does.
func TestStatementsPerRunDoNotGrowWithTokens(t *testing.T) {
	t.Parallel()
	count := func(words int) []string {
		counter := &statementCounter{}
		st := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
		a := startActor(t, st, script.New(
			script.Words(words/2),
			script.Tool("c1", "lookup", `{"q": "x"}`, "result"),
			script.Words(words-words/2),
		))
		s := convtest.New()
		ctx := context.Background()
		_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
		require.NoError(t, err)

		counter.reset()
		_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
		require.NoError(t, err)
		end := s.Await(t, convtest.Terminal)
		require.EqualValues(t, "chat.done", end.Type)
		require.NoError(t, a.Flush(ctx)) // the run's writes are stored behind its events
		stmts := counter.taken()

		msgs := s.Messages()
		require.Len(t, msgs, 4)
		require.Equal(t, script.Joined(words/2), msgs[1].Content)
		return stmts
	}
	small, large := count(10), count(1000)
	t.Logf("statements for a run with 2 segments and 1 tool call: %d\n%s", len(large), strings.Join(large, "\n"))
	require.Equal(t, len(small), len(large), "statements must not depend on the number of tokens")
	// 2 segments + 1 tool call: at most 2 × 3 + 4 (the benchmark issue's bound).
	require.LessOrEqual(t, len(large), 2*(2+1)+4)
	// And exactly: the run and user message in one statement, an insert and an update per
	// segment and per tool call, the run's end. The model's history comes from the
	// actor's memory of the session (its hello read it), not from a statement.
	require.Len(t, large, 1+2+2+2+1)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A live session's snapshots come from the actor's memory: after the first hello's read,
// hellos that need a snapshot (here: new tabs, mid-run, at a tool call and after the
// end) make no statement at all, and each snapshot is what the live tab has, which is
// what the database holds once the run's writes are stored.
func TestSnapshotsOfALiveSessionComeFromMemory(t *testing.T) {
	t.Parallel()
	counter := &statementCounter{}
	st := storetest.New(t, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
	gate, gate2 := script.NewGate(), script.NewGate()
	a := startActor(t, st, script.New(
		script.Text("first ", "part"), gate.Wait(),
		script.Tool("c1", "lookup", `{"q": "x"}`, "result"),
		script.Text("second"), gate2.Wait(), script.Text(" part"),
	))
	ctx := testCtx(t)
	live := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: live})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)

	snapshot := func() []chat.Message {
		t.Helper()
		require.NoError(t, a.Flush(ctx))
		counter.reset()
		s := convtest.New()
		_, err := a.Hello(ctx, conversation.HelloRequest{Subscriber: s})
		require.NoError(t, err)
		snap := s.AwaitCatchUp(t, 1).Snapshot
		require.NotNil(t, snap)
		a.Unsubscribe(ctx, s)
		require.Empty(t, counter.taken(), "a live session's snapshot reads nothing")
		return snap.Messages
	}
	live.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventDelta && ev.Text == "part" })
	require.Empty(t, convtest.Diff(live.Messages(), snapshot()), "mid-segment")
	require.NoError(t, gate.Pass(ctx))
	live.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventDelta && ev.Text == "second" })
	require.Empty(t, convtest.Diff(live.Messages(), snapshot()), "after the tool call")
	require.NoError(t, gate2.Pass(ctx))
	require.EqualValues(t, "chat.done", live.Await(t, convtest.Terminal).Type)
	snap := snapshot()
	require.Empty(t, convtest.Diff(live.Messages(), snap), "after the end")
	stored, _, err := st.MessagesBefore(ctx, a.SessionID(), 0, 100)
	require.NoError(t, err)
	require.Empty(t, convtest.Diff(stored, snap), "memory is the database")
	require.Len(t, snap, 4)
}
