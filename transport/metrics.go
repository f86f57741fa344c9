package transport

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts connections and what their writers send, whatever the transport. One
// Metrics serves every connection of a process; incrementing is all a writer's hot path
// does. A nil *Metrics counts nothing.
type Metrics struct {
	connectionsOpen prometheus.Gauge
	framesSent      prometheus.Counter
	slowDrops       prometheus.Counter
}

// NewMetrics returns the transport's metrics, registered with reg unless it is nil:
// chatd_connections_open, chatd_frames_sent_total and chatd_slow_consumer_drops_total.
// Pass it to the transports (ws.Config.Metrics).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_connections_open",
			Help: "WebSocket connections currently open.",
		}),
		framesSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatd_frames_sent_total",
			Help: "Frames written to WebSockets: events, catch-up frames (snapshot, resumed, replayed events) and replies.",
		}),
		slowDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatd_slow_consumer_drops_total",
			Help: "Connections closed with 4008 because their send queue overflowed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.connectionsOpen, m.framesSent, m.slowDrops)
	}
	return m
}

// ConnectionOpened counts a connection the transport now serves.
func (m *Metrics) ConnectionOpened() {
	if m != nil {
		m.connectionsOpen.Inc()
	}
}

// ConnectionClosed counts a connection the transport no longer serves.
func (m *Metrics) ConnectionClosed() {
	if m != nil {
		m.connectionsOpen.Dec()
	}
}

func (m *Metrics) sent(n int) {
	if m != nil && n > 0 {
		m.framesSent.Add(float64(n))
	}
}

func (m *Metrics) slowDrop() {
	if m != nil {
		m.slowDrops.Inc()
	}
}
