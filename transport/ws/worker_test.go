package ws_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// gatedEnv is an env whose database calls wait while gate is held.
func gatedEnv(t *testing.T, gate *storeGate, o envOptions) *env {
	t.Helper()
	o.conv = func(c *conversation.Config) { c.Store = slowStore{Store: c.Store, wait: gate.wait} }
	if o.agent == nil {
		o.agent = script.New(script.Text("a", "b"))
	}
	return newEnv(t, o)
}

// next returns the next frame the background reader got.
func (r *bgReader) next(ctx context.Context, t *testing.T) wstest.Frame {
	t.Helper()
	select {
	case f := <-r.frames:
		return f
	case err := <-r.err:
		t.Fatalf("connection ended while waiting for a frame: %v", err)
	case <-ctx.Done():
		t.Fatal("no frame came")
	}
	return wstest.Frame{}
}

// requireBusy sends a command and requires that the next frame is its busy error.
func (r *bgReader) requireBusy(ctx context.Context, t *testing.T, requestID string) {
	t.Helper()
	r.c.Send(map[string]any{"type": "history.fetch", "requestId": requestID, "limit": 1})
	f := r.next(ctx, t)
	require.Equal(t, "error", f.Type, "reply to %s: %s", requestID, f.Raw)
	require.Equal(t, "busy", f.Code, "reply to %s: %s", requestID, f.Raw)
	require.Equal(t, requestID, f.RequestID, "reply to %s: %s", requestID, f.Raw)
	require.NotEmpty(t, f.ErrorText)
}

// A client that floods one connection with commands while they wait on the database gets
// the documented limit: the commands within it are answered in order once the database
// answers, exactly those beyond it get busy at once, and the reader never stops reading
// (pings are answered, a late frame is answered at once).
func TestCommandFloodMeetsTheLimit(t *testing.T) {
	t.Parallel()
	gate := newStoreGate()
	e := gatedEnv(t, gate, envOptions{})
	ctx := waitContext(t)
	c, pings := pingClient(t, e, true)
	c.Chat("r0", "hello") // something to read: an empty session's history reads nothing
	c.ReadTerminal()
	r := readInBackground(t, c)

	// Every database call waits from now on: the first history.fetch holds the worker.
	gate.hold()
	const limit, beyond = ws.DefaultMaxQueuedCommands, 8
	for i := range limit + beyond {
		c.Send(map[string]any{"type": "history.fetch", "requestId": fmt.Sprintf("f-%02d", i), "limit": 1})
	}
	gate.awaitEntered(ctx, t)
	for i := limit; i < limit+beyond; i++ {
		f := r.next(ctx, t)
		require.Equal(t, "error", f.Type, "%s", f.Raw)
		require.Equal(t, "busy", f.Code, "%s", f.Raw)
		require.Equal(t, fmt.Sprintf("f-%02d", i), f.RequestID, "%s", f.Raw)
	}

	// The worker still waits on the database; the reader goes on. A ping is answered (the
	// second busy round trip is on the wire behind the pong, so its answer means the
	// server has read the pong), and a whole ping timeout later the connection is up.
	require.NoError(t, e.WSClock.BlockUntilContext(ctx, 1)) // the ping timer
	e.WSClock.Advance(ws.DefaultPingInterval)
	r.waitPing(ctx, t, pings)
	r.requireBusy(ctx, t, "late-a")
	r.requireBusy(ctx, t, "late-b")
	e.WSClock.Advance(ws.DefaultPingTimeout)
	r.requireBusy(ctx, t, "late-c")

	// The database answers: each command within the limit gets its reply, in order.
	gate.open()
	for i := range limit {
		f := r.next(ctx, t)
		require.Equal(t, "history", f.Type, "%s", f.Raw)
		require.Equal(t, fmt.Sprintf("f-%02d", i), f.RequestID, "%s", f.Raw)
	}
	// Nothing else was queued, and the connection takes commands again.
	r.roundTrip(ctx, t, "after")
}

// Commands may follow hello without waiting for its answer: the worker handles them
// after it, in order. Frames that are not commands are answered by the reader at once,
// even while the hello waits on the database.
func TestCommandsPipelinedBehindHello(t *testing.T) {
	t.Parallel()
	gate := newStoreGate()
	e := gatedEnv(t, gate, envOptions{agent: script.New(script.Text("pipe", "lined"))})
	ctx := waitContext(t)

	c := e.dial()
	gate.hold()
	c.Send(map[string]any{"type": "hello", "requestId": "h"})
	c.Send(map[string]any{"type": "chat.send", "requestId": "r1", "content": "hi"})
	c.Send(map[string]any{"type": "history.fetch", "requestId": "h1"})
	c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "probe"})
	gate.awaitEntered(ctx, t)
	probe := c.Read()
	require.Equal(t, "error", probe.Type, "%s", probe.Raw)
	require.Equal(t, "unknown_type", probe.Code, "%s", probe.Raw)
	require.Equal(t, "probe", probe.RequestID)

	gate.open()
	snap := c.Read()
	require.Equal(t, "snapshot", snap.Type, "%s", snap.Raw)
	require.Equal(t, "h", snap.RequestID)
	ack := c.ReadReply("r1")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	page := c.ReadReply("h1")
	require.Equal(t, "history", page.Type, "%s", page.Raw)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	require.Equal(t, "pipelined", c.State.Sorted()[1].Content)
	e.requireConverged(c.State.SessionID, c)
}

// A connection that ends while its command waits on the database does not wait for the
// database: the command is cancelled with the connection, the worker ends, and the
// handler lets go of the session.
func TestClosingWhileACommandWaitsOnTheDatabase(t *testing.T) {
	t.Parallel()
	gate := newStoreGate()
	reg := prometheus.NewRegistry()
	e := gatedEnv(t, gate, envOptions{wsConfig: metricsOption(transport.NewMetrics(reg), nil)})
	ctx := waitContext(t)

	c := e.session()
	c.Chat("r1", "hello") // something to read: an empty session's history reads nothing
	c.ReadTerminal()
	gate.hold()
	c.Send(map[string]any{"type": "history.fetch", "requestId": "stuck"})
	gate.awaitEntered(ctx, t)
	require.NoError(t, c.WS.Close(websocket.StatusNormalClosure, "bye"))

	// Shutdown waits for every handler; the only one left is that connection's, whose
	// command still waits on the database. It returns without the database answering.
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, e.srv.Shutdown(stopCtx))
	require.Zero(t, metricValue(t, reg, "chatd_connections_open"))
	require.Zero(t, metricValue(t, reg, "chatd_slow_consumer_drops_total"))
	gate.open()
}
