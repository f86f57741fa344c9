package transport

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts connections and what their writers send. One Metrics serves every
// connection of a Server; incrementing is all the writer's hot path does.
type Metrics struct {
	connectionsOpen prometheus.Gauge
	framesSent      prometheus.Counter
	slowDrops       prometheus.Counter
}

// NewMetrics returns the transport's metrics, registered with reg unless it is nil:
// chatd_connections_open, chatd_frames_sent_total and chatd_slow_consumer_drops_total.
// Pass it in Config.Metrics.
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

// discardMetrics stands in for a Config without Metrics.
var discardMetrics = sync.OnceValue(func() *Metrics { return NewMetrics(nil) })
