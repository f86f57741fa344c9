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
	rateLimited     *prometheus.CounterVec
}

// The limits chatd_rate_limited_total counts, its label "limit".
const (
	// LimitCommand: a command over its connection's command rate (error rate_limited).
	LimitCommand = "command"
	// LimitUserConns: a connection over its user's connection limit (close 4029).
	LimitUserConns = "user_conns"
	// LimitAddrConns: a connection over its remote address's connection limit (close 4029).
	LimitAddrConns = "addr_conns"
	// LimitHandshake: an upgrade over its remote address's handshake rate (HTTP 429).
	LimitHandshake = "handshake"
	// LimitRuns: a run over its user's limit of active runs (error rate_limited).
	LimitRuns = "runs"
)

// NewMetrics returns the transport's metrics, registered with reg unless it is nil:
// chatd_connections_open, chatd_frames_sent_total, chatd_slow_consumer_drops_total and
// chatd_rate_limited_total{limit}.
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
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_rate_limited_total",
			Help: "Commands, connections, handshakes and runs refused by a limit: command and runs (error rate_limited), user_conns and addr_conns (close 4029), handshake (HTTP 429).",
		}, []string{"limit"}),
	}
	for _, l := range []string{LimitCommand, LimitUserConns, LimitAddrConns, LimitHandshake, LimitRuns} {
		m.rateLimited.WithLabelValues(l) // shown at 0 from the start
	}
	if reg != nil {
		reg.MustRegister(m.connectionsOpen, m.framesSent, m.slowDrops, m.rateLimited)
	}
	return m
}

// RateLimited counts one refusal by limit (LimitCommand, ...).
func (m *Metrics) RateLimited(limit string) {
	if m != nil {
		m.rateLimited.WithLabelValues(limit).Inc()
	}
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
