package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics measures the loop's model calls.
type Metrics struct {
	firstToken prometheus.Observer
}

// NewMetrics returns the loop's metrics, registered with reg unless it is nil:
// chatd_model_first_token_seconds. Pass it in Config.Metrics.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "chatd_model_first_token_seconds",
		Help: "Time from the start of a model call (each attempt) to the first text, reasoning or tool call it streams; calls that stream none are not observed.",
		// Local models answer in milliseconds, hosted ones in about a second, loaded
		// ones much later.
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
	})
	if reg != nil {
		reg.MustRegister(h)
	}
	return &Metrics{firstToken: h}
}

// discardMetrics stands in for a Config without Metrics.
var discardMetrics = sync.OnceValue(func() *Metrics { return NewMetrics(nil) })
