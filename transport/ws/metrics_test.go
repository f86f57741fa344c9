package ws_test

import (
	"context"
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
