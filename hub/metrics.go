package hub

import "github.com/prometheus/client_golang/prometheus"

// Metrics describes the hub: how many actors are in memory.
type Metrics struct {
	actorsLive prometheus.Gauge
}

// NewMetrics returns the hub's metrics, registered with reg unless it is nil:
// chatd_actors_live. Give it to New with WithMetrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{actorsLive: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "chatd_actors_live",
		Help: "Conversation actors in memory: sessions with a connection, a run, or not yet idle for the eviction period.",
	})}
	if reg != nil {
		reg.MustRegister(m.actorsLive)
	}
	return m
}

// Option configures a Hub.
type Option func(*Hub)

// WithMetrics makes the hub report to m. Without it the hub reports nothing.
func WithMetrics(m *Metrics) Option {
	return func(h *Hub) { h.metrics = m }
}

// countActors sets chatd_actors_live. Called with h.mu held, after every change to
// h.actors, so the gauge is the map's size and cannot drift.
func (h *Hub) countActors() {
	if h.metrics != nil {
		h.metrics.actorsLive.Set(float64(len(h.actors)))
	}
}
