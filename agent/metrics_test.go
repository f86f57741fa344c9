package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
)

// Each model call's time to its first output is observed, on the loop's clock: a usage
// report is not output, and an attempt that fails before any output is not observed.
func TestMetricsTimeToFirstToken(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	calls := make(chan time.Time)
	started, release := make(chan struct{}), make(chan struct{})
	var h *harness
	model := modeltest.New(
		modeltest.Turn{Before: modelCalls(&h, calls), Err: modeltest.Transient("overloaded")},
		modeltest.Turn{
			Before: func(ctx context.Context) error {
				started <- struct{}{}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			},
			Events: modeltest.Events([]agent.ModelEvent{modeltest.Usage(10, 0)}, modeltest.Text("Hello", " again.")),
		},
	)
	h = newHarness(t, model, noIdleTimeout, func(c *agent.Config) { c.Metrics = agent.NewMetrics(reg) })
	h.send("hi")

	recv(t, calls, "the first model call")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultRetryBackoff)
	recv(t, started, "the retry")
	h.clock.Advance(2500 * time.Millisecond)
	give(t, release, struct{}{}, "the retry's answer")
	require.Equal(t, "chat.done", h.end().Type)

	families, err := reg.Gather()
	require.NoError(t, err)
	var hist *dto.Histogram
	for _, f := range families {
		if f.GetName() == "chatd_model_first_token_seconds" {
			hist = f.GetMetric()[0].GetHistogram()
		}
	}
	require.NotNil(t, hist)
	require.EqualValues(t, 1, hist.GetSampleCount(), "the failed attempt streamed nothing")
	require.InDelta(t, 2.5, hist.GetSampleSum(), 1e-9)
}
