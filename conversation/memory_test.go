package conversation

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The returner returns memory in a pass once the threshold was dropped since the last
// return, or once a burst of at least 1 MiB is over (nothing more dropped for a pass);
// one return for all of it, counted.
func TestMemoryReturnedAfterEnoughIsDropped(t *testing.T) {
	// In a bubble the real clock's time is the bubble's: a pass is a second of it, and
	// synctest.Wait returns once the pass is over.
	synctest.Test(t, func(t *testing.T) {
		var returned atomic.Int32
		frees := func() int { return int(returned.Load()) }
		reg := prometheus.NewRegistry()
		const threshold = 32 << 20
		m := NewMemoryReturner(clockwork.NewRealClock(), time.Second, threshold, func() { returned.Add(1) }, NewMetrics(reg))
		ctx := t.Context()
		require.NoError(t, m.Start(ctx))
		pass := func() {
			time.Sleep(time.Second)
			synctest.Wait()
		}
		synctest.Wait()
		require.Zero(t, frees(), "nothing dropped yet")

		m.dropped(threshold / 2)
		pass()
		require.Zero(t, frees(), "half the threshold, and drops may go on")
		m.dropped(threshold / 2)
		pass()
		require.Equal(t, 1, frees(), "the threshold: returned at once")
		pass()
		require.Equal(t, 1, frees(), "the count starts again after a return")

		m.dropped(2 << 20)
		pass()
		require.Equal(t, 1, frees(), "2 MiB: not before the drops stop")
		pass()
		require.Equal(t, 2, frees(), "nothing more for a pass: the burst is over, returned")

		m.dropped(100 << 10)
		pass()
		pass()
		pass()
		require.Equal(t, 2, frees(), "a burst under 1 MiB is not worth a collection")
		m.dropped(threshold)
		pass()
		require.Equal(t, 3, frees(), "it counts towards the threshold")
		require.EqualValues(t, 3, metricValue(t, reg, "chatd_memory_returned_total"))
		require.NoError(t, m.Stop(ctx))

		var none *MemoryReturner
		none.dropped(1) // an actor without a returner
	})
}

// metricValue returns the value of reg's counter or gauge name, which has no labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			if m := f.GetMetric()[0]; m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}
