package transport

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chatd/chatd/internal/counter"
)

// Metrics counts connections and what their writers send, whatever the transport. One
// Metrics serves every connection of a process; incrementing is all a writer's hot path
// does. A nil *Metrics counts nothing.
type Metrics struct {
	connectionsOpen prometheus.Gauge
	framesSent      counter.Sharded // each outbox adds to its own slot: see package counter
	writersStarted  prometheus.Counter
	slowDrops       prometheus.Counter
	rateLimited     *prometheus.CounterVec
	relayedConns    *prometheus.CounterVec
	relayedOpen     prometheus.Gauge
	relayedRequests prometheus.Counter
}

// How a connection was relayed, chatd_relayed_connections_total's label "via".
const (
	// RelayViaHello: after its hello, to the node holding the session it named.
	RelayViaHello = "hello"
	// RelayViaUpgrade: its upgrade request, whose ?session= named a session another
	// node holds, was proxied whole.
	RelayViaUpgrade = "upgrade"
)

// The limits chatd_rate_limited_total counts, its label "limit".
const (
	// LimitCommand: a command over its connection's command rate (error rate_limited).
	LimitCommand = "command"
	// LimitUserConns: a WebSocket or an AI SDK stream over its user's limit of
	// connections (close 4029, HTTP 429).
	LimitUserConns = "user_conns"
	// LimitAddrConns: a connection over its remote address's connection limit (HTTP 429
	// at the listener, close 4029 for a WebSocket).
	LimitAddrConns = "addr_conns"
	// LimitConns: a connection over the listener's limit of connections (HTTP 503).
	LimitConns = "conns"
	// LimitSessions: a new session over its user's limit of sessions (error
	// too_many_sessions).
	LimitSessions = "sessions"
	// LimitHandshake: an upgrade over its remote address's handshake rate (HTTP 429).
	LimitHandshake = "handshake"
	// LimitRuns: a run over its user's limit of active runs (error rate_limited).
	LimitRuns = "runs"
)

// NewMetrics returns the transport's metrics, registered with reg unless it is nil:
// chatd_connections_open, chatd_frames_sent_total, chatd_writers_started_total,
// chatd_slow_consumer_drops_total and
// chatd_rate_limited_total{limit}, chatd_relayed_connections_total{via},
// chatd_relayed_connections_open and chatd_relayed_requests_total.
// Pass it to the transports (ws.Config.Metrics).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		connectionsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_connections_open",
			Help: "WebSocket connections currently open.",
		}),
		writersStarted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatd_writers_started_total",
			Help: "Writer goroutines started for a connection: for a catch-up, a close, or frames its socket did not take at once (frames it takes at once are written directly, without one).",
		}),
		slowDrops: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatd_slow_consumer_drops_total",
			Help: "Connections closed with 4008 because their send queue overflowed.",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_rate_limited_total",
			Help: "Commands, connections, handshakes, runs and sessions refused by a limit: command and runs (error rate_limited), sessions (error too_many_sessions), user_conns (close 4029 or HTTP 429), addr_conns (HTTP 429, or close 4029), conns (HTTP 503), handshake (HTTP 429).",
		}, []string{"limit"}),
		relayedConns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chatd_relayed_connections_total",
			Help: "WebSocket connections relayed to the node holding their session: via hello (after the hello) or upgrade (?session= proxied the upgrade).",
		}, []string{"via"}),
		relayedOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "chatd_relayed_connections_open",
			Help: "WebSocket connections currently relayed to another node.",
		}),
		relayedRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chatd_relayed_requests_total",
			Help: "HTTP API requests proxied to the node holding their session.",
		}),
	}
	for _, v := range []string{RelayViaHello, RelayViaUpgrade} {
		m.relayedConns.WithLabelValues(v)
	}
	for _, l := range []string{LimitCommand, LimitUserConns, LimitAddrConns, LimitHandshake, LimitRuns} {
		m.rateLimited.WithLabelValues(l) // shown at 0 from the start
	}
	if reg != nil {
		framesSent := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "chatd_frames_sent_total",
			Help: "Frames written to WebSockets: events, catch-up frames (snapshot, resumed, replayed events) and replies.",
		}, func() float64 { return float64(m.framesSent.Load()) })
		reg.MustRegister(m.connectionsOpen, framesSent, m.writersStarted, m.slowDrops, m.rateLimited, m.relayedConns, m.relayedOpen, m.relayedRequests)
	}
	return m
}

// RateLimited counts one refusal by limit (LimitCommand, ...).
func (m *Metrics) RateLimited(limit string) {
	if m != nil {
		m.rateLimited.WithLabelValues(limit).Inc()
	}
}

// RelayOpened counts a connection now relayed to another node, via RelayViaHello or
// RelayViaUpgrade; RelayClosed counts it gone.
func (m *Metrics) RelayOpened(via string) {
	if m != nil {
		m.relayedConns.WithLabelValues(via).Inc()
		m.relayedOpen.Inc()
	}
}

// RelayClosed counts a relayed connection that has ended.
func (m *Metrics) RelayClosed() {
	if m != nil {
		m.relayedOpen.Dec()
	}
}

// RequestRelayed counts an HTTP request proxied to another node.
func (m *Metrics) RequestRelayed() {
	if m != nil {
		m.relayedRequests.Inc()
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

// sentSlot returns where a connection counts the frames it sends (nil: nowhere).
func (m *Metrics) sentSlot() *counter.Slot {
	if m == nil {
		return nil
	}
	return m.framesSent.Slot()
}

func (m *Metrics) writerStarted() {
	if m != nil {
		m.writersStarted.Inc()
	}
}

func (m *Metrics) slowDrop() {
	if m != nil {
		m.slowDrops.Inc()
	}
}
