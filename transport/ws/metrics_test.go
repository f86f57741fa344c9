package ws_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// metricsOption gives the env's server metrics of their own.
func metricsOption(m *transport.Metrics, next func(*ws.Config)) func(*ws.Config) {
	return func(c *ws.Config) {
		c.Metrics = m
		if next != nil {
			next(c)
		}
	}
}

// metricValue returns the value of the unlabelled counter or gauge name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			m := f.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

// Every frame a client reads is counted once, catch-ups and replies included, and open
// connections are counted while they are open.
func TestMetricsCountConnectionsAndFrames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text("Hello", ", ", "world")),
		wsConfig: metricsOption(transport.NewMetrics(reg), nil),
	})
	require.Zero(t, metricValue(t, reg, "chatd_connections_open"))

	a := e.session()
	b := e.join(a.State.SessionID)
	silent := e.dial()
	require.Equal(t, "ack", a.Chat("r1", "hi").Type)
	a.ReadTerminal()
	b.ReadTerminal()
	// A connection counts once the server has it; answering a hello shows it has.
	silent.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "h"})
	require.Equal(t, "error", silent.ReadReply("h").Type)
	require.EqualValues(t, 3, metricValue(t, reg, "chatd_connections_open"))

	// Shutting down closes every connection after what is queued: then every frame has
	// been written and counted.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, e.hub.Shutdown(ctx))
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Shutdown(ctx) }()
	for _, c := range []*wstest.Client{a, b, silent} {
		require.EqualValues(t, 1001, c.ExpectClose())
	}
	require.NoError(t, <-stopped)

	// a: snapshot, the run's events and the ack; b: snapshot and events; silent: the
	// error reply.
	want := 1 + len(a.Seen) + 1 + 1 + len(b.Seen) + 1
	require.Equal(t, len(a.Seen), len(b.Seen))
	require.EqualValues(t, want, metricValue(t, reg, "chatd_frames_sent_total"))
	require.Zero(t, metricValue(t, reg, "chatd_connections_open"))
	require.Zero(t, metricValue(t, reg, "chatd_slow_consumer_drops_total"))
}

// A frame the socket takes at once is written by the goroutine that queues it (the
// actor, the worker replying): while clients keep up, a connection starts a writer
// goroutine for its catch-up and its close, not for each event. The tokens come one at a
// time, each once both tabs read the one before, so each would need a writer of its own.
func TestFramesTheSocketTakesAreWrittenDirectly(t *testing.T) {
	t.Parallel()
	const tokens = 50
	gate := script.NewGate()
	var steps []script.Step
	for range tokens {
		steps = append(steps, gate.Wait(), script.Text("token "))
	}
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent:    script.New(steps...),
		wsConfig: metricsOption(transport.NewMetrics(reg), nil),
	})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Equal(t, "ack", a.Chat("r1", "hi").Type)
	ctx := testCtx(t)
	for i := range tokens {
		require.NoError(t, gate.Pass(ctx))
		// chat.started and assistant.segment.started, then a delta per token.
		a.ReadToSeq(int64(2 + i + 1))
		b.ReadToSeq(int64(2 + i + 1))
	}
	require.Equal(t, "chat.done", a.ReadTerminal().Type)
	require.Equal(t, "chat.done", b.ReadTerminal().Type)

	frames := metricValue(t, reg, "chatd_frames_sent_total")
	require.GreaterOrEqual(t, frames, float64(2*tokens))
	// Two catch-ups; a few more if a socket did not take a frame at once.
	require.LessOrEqual(t, metricValue(t, reg, "chatd_writers_started_total"), 6.0, "of %v frames", frames)
}

// The frames written directly carry their own header (batchConn.writeText): a text
// frame of every header size (7-bit, 16-bit and 64-bit lengths, at their edges) reaches
// coder/websocket's client whole and in order.
func TestDirectFramesOfEverySize(t *testing.T) {
	t.Parallel()
	// The delta frame's JSON wraps each token in about 150 bytes of fields: sizes
	// around each header's edges are covered by these and the frames around them.
	sizes := []int{1, 5, 60, 120, 65000, 65400, 70000, 300000}
	var tokens []string
	for i, n := range sizes {
		tokens = append(tokens, strings.Repeat(string(rune('a'+i)), n))
	}
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text(tokens...)),
		wsConfig: metricsOption(transport.NewMetrics(reg), nil),
	})
	a := e.session()
	require.Equal(t, "ack", a.Chat("r1", "hi").Type)
	require.Equal(t, "chat.done", a.ReadTerminal().Type)
	var got strings.Builder
	for _, f := range a.Seen {
		if f.Type == "chat.delta" {
			got.WriteString(*f.Text)
		}
	}
	require.Equal(t, strings.Join(tokens, ""), got.String())
	require.LessOrEqual(t, metricValue(t, reg, "chatd_writers_started_total"), 3.0, "written directly")
}
