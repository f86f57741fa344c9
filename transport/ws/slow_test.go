package ws_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
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

// slowIP is the loopback address slow clients dial from, so the server can shrink the
// kernel buffers of their connections alone.
var slowIP = net.IPv4(127, 0, 0, 2)

// smallBuffers shrinks the server side's send buffer of connections from slowIP, so a
// client that stops reading backs up into the server's queue after a few KiB instead of
// a few MiB.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok && tc.RemoteAddr().(*net.TCPAddr).IP.Equal(slowIP) {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// smallReceiveBuffer dials from slowIP with a small receive buffer.
func smallReceiveBuffer() *wstest.DialOptions {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: slowIP}, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return &wstest.DialOptions{HTTPClient: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}}
}

func TestSlowConsumerIsDroppedAndOthersAreNot(t *testing.T) {
	t.Parallel()
	t.Run("reads nothing", func(t *testing.T) { t.Parallel(); slowConsumer(t, false) })
	// Its pings make the server write pongs, while it reads nothing, from the
	// connection's reader: with frames written directly by the actor, those writes
	// must never hold what the actor needs while they wait for the client.
	t.Run("pings and reads nothing", func(t *testing.T) { t.Parallel(); slowConsumer(t, true) })
}

func slowConsumer(t *testing.T, ping bool) {
	// 40 batches of 50 deltas of 200 bytes: 400 KB of text, far more than the slow
	// client's queue and buffers. The agent waits at a gate between batches so the test
	// can let the fast tab catch up: it must never be the one that is too slow.
	const batches, perBatch = 40, 50
	chunk := strings.Repeat("x", 200)
	batch := make([]string, perBatch)
	for i := range batch {
		batch[i] = chunk
	}
	gate := script.NewGate()
	var steps []script.Step
	for range batches {
		steps = append(steps, gate.Wait(), script.Text(batch...))
	}
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent:    script.New(steps...),
		wsConfig: metricsOption(transport.NewMetrics(reg), func(c *ws.Config) { c.SendQueueBytes = 64 << 10 }),
		listener: func(l net.Listener) net.Listener { return smallBuffers{l} },
	})

	fastClient := e.session()
	sessionID := fastClient.State.SessionID
	fast := newObserver(fastClient)

	slow := wstest.Dial(t, e.URL, smallReceiveBuffer())
	slow.Hello(sessionID)
	// From here the slow client reads nothing until the run is over.
	if ping {
		pinging, stop := context.WithCancel(context.Background())
		pinged := make(chan struct{})
		go func() {
			defer close(pinged)
			for pinging.Err() == nil {
				// No pong is read, so each ping ends at its timeout; it was sent.
				ctx, cancel := context.WithTimeout(pinging, 5*time.Millisecond)
				_ = slow.WS.Ping(ctx)
				cancel()
			}
		}()
		defer func() { stop(); <-pinged }()
	}

	sender := e.join(sessionID)
	sender.Send(map[string]any{"type": "chat.send", "requestId": "r1", "content": "flood"})
	ctx := testCtx(t)
	for b := range batches {
		require.NoError(t, gate.Pass(ctx))
		// chat.started, assistant.segment.started, then perBatch deltas per batch.
		want := int64(2 + (b+1)*perBatch)
		for fast.lastSeq() < want {
			fast.waitProgress(t)
		}
	}

	end := fast.terminal(t)
	require.Equal(t, "chat.done", end.Type)

	// The slow client gets what was queued before the drop, then 4008. (A pinging one
	// closes its connection itself when a ping cannot be written within its timeout:
	// the server's reader, which answers pings, waits on the full socket. What matters
	// then is that nothing else did.)
	code := slow.ExpectClose()
	require.Less(t, slow.State.LastSeq, fast.lastSeq(), "the slow client cannot have kept up")
	if !ping {
		require.Equal(t, websocket.StatusCode(4008), code)
		require.EqualValues(t, 1, metricValue(t, reg, "chatd_slow_consumer_drops_total"), "the slow client alone")
	}

	// The fast client got everything, and the run completed and was stored.
	require.NoError(t, fast.stop())
	e.requireConverged(sessionID, fast.c)
	require.Equal(t, "done", string(storedRun(t, e, sessionID, "r1").Status))

	// The dropped client reconnects from where it was and converges.
	back, f := slow.Resume(e.URL, nil)
	require.Contains(t, []string{"resumed", "snapshot"}, f.Type)
	back.ReadToSeq(fast.c.State.LastSeq)
	e.requireConverged(sessionID, back)
}

// A reply that does not fit the queue of a connection that stopped reading is handled
// like an event that does not fit: that connection alone is closed with 4008.
func TestSlowConsumerRepliesDoNotBlock(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text("ok")),
		wsConfig: metricsOption(transport.NewMetrics(reg), func(c *ws.Config) { c.SendQueueBytes = 2048 }),
		listener: func(l net.Listener) net.Listener { return smallBuffers{l} },
	})
	c := wstest.Dial(t, e.URL, smallReceiveBuffer())
	c.Hello("")
	// Many commands without reading a single reply: each answer is queued; the server's
	// reader never waits for the writer.
	// 400 error replies of about 150 bytes are far more than the queue and the buffers.
	ctx, cancel := context.WithTimeout(context.Background(), wstest.ReadTimeout)
	defer cancel()
	for range 400 {
		err := c.WS.Write(ctx, websocket.MessageText, []byte(`{"type":"no-such-type-`+strings.Repeat("y", 60)+`"}`))
		require.NoError(t, err)
	}
	// Now read: some error replies, then the close.
	require.Equal(t, websocket.StatusCode(4008), c.ExpectClose())
	require.EqualValues(t, 1, metricValue(t, reg, "chatd_slow_consumer_drops_total"))
}

// A snapshot or a history page larger than the send queue must not get the live events
// behind it refused: a tab that joins a long conversation mid-run, on a slow link, is not
// "too slow" for receiving the conversation it asked for.
func TestLargeCatchUpAndHistoryDoNotCountAsBacklog(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{
		agent: script.PerRun(func(req conversation.Request) []script.Step {
			if req.Content == "long" {
				return []script.Step{script.Text(strings.Repeat("x", 8000))}
			}
			return []script.Step{gate.Wait(), script.Words(20), gate.Wait(), script.Words(20)}
		}),
		wsConfig: func(c *ws.Config) { c.SendQueueBytes = 16 << 10 },
		listener: func(l net.Listener) net.Listener { return smallBuffers{l} },
	})
	a := e.session()
	// 32 KB of history, twice the queue, in runs small enough for the queue.
	for i := range 4 {
		require.Equal(t, "ack", a.Chat(fmt.Sprint("long-", i), "long").Type)
		a.ReadTerminal()
	}
	require.Equal(t, "ack", a.Chat("r2", "streaming").Type)

	// A slow tab says hello and does not read yet: its snapshot (larger than the queue)
	// sits in the server's writer while the run streams.
	slow := wstest.Dial(t, e.URL, smallReceiveBuffer())
	slow.Send(map[string]any{"type": "hello", "sessionId": a.State.SessionID})
	ctx := testCtx(t)
	require.NoError(t, gate.Pass(ctx))
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == " w20" })

	snap := slow.Read()
	require.Equal(t, "snapshot", snap.Type)
	slow.ReadToSeq(a.State.LastSeq)

	// A history page larger than the queue, asked for while events are waiting.
	slow.Send(map[string]any{"type": "history.fetch", "requestId": "h", "limit": 200})
	require.NoError(t, gate.Pass(ctx))
	a.ReadTerminal()
	page := slow.ReadReply("h")
	require.Equal(t, "history", page.Type, "%s", page.Raw)
	slow.ReadToSeq(a.State.LastSeq)
	e.requireConverged(a.State.SessionID, a, slow)
}
