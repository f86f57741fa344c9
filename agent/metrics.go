package agent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics measures the loop's model calls and the sandboxes' workspaces.
type Metrics struct {
	firstToken prometheus.Observer
	// workspacesRemoved counts removed workspaces by reason: removedDeleted,
	// removedRetention.
	workspacesRemoved *prometheus.CounterVec
}

// Reasons a workspace is removed, the values of chatd_workspaces_removed_total's reason.
const (
	// removedDeleted: its session was deleted.
	removedDeleted = "deleted"
	// removedRetention: its sandbox stopped being its session's (the janitor killed it,
	// or another replaced it) longer ago than the retention.
	removedRetention = "retention"
)

// NewMetrics returns the loop's and the sandboxes' metrics, registered with reg unless
// it is nil: chatd_model_first_token_seconds and chatd_workspaces_removed_total. Pass it
// in Config.Metrics and to NewSandboxes (WithMetrics).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "chatd_model_first_token_seconds",
		Help: "Time from the start of a model call (each attempt) to the first text, reasoning or tool call it streams; calls that stream none are not observed.",
		// Local models answer in milliseconds, hosted ones in about a second, loaded
		// ones much later.
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
	})
	removed := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chatd_workspaces_removed_total",
		Help: "Sandbox workspaces this node removed from disk, by reason: deleted (their session was deleted) or retention (their sandbox was killed or replaced longer ago than CHATD_WORKSPACE_RETENTION).",
	}, []string{"reason"})
	// Both series exist from the start, so that a rate over them starts at zero.
	removed.WithLabelValues(removedDeleted)
	removed.WithLabelValues(removedRetention)
	if reg != nil {
		reg.MustRegister(h, removed)
	}
	return &Metrics{firstToken: h, workspacesRemoved: removed}
}

// discardMetrics stands in for a Config without Metrics.
var discardMetrics = sync.OnceValue(func() *Metrics { return NewMetrics(nil) })
