package conversation

import (
	"math"
	"runtime/metrics"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// fakeLatencies is a histogram of scheduling latencies the test fills: each interval's
// waits go into the bucket whose lower bound is the wait.
type fakeLatencies struct {
	mu     sync.Mutex
	counts []uint64
	reads  int
}

var fakeBuckets = []float64{0, 100e-6, 500e-6, 2e-3, 10e-3, 1}

func (f *fakeLatencies) add(wait time.Duration, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(fakeBuckets) - 2; i >= 0; i-- {
		if wait.Seconds() >= fakeBuckets[i] {
			f.counts[i] += n
			return
		}
	}
}

func (f *fakeLatencies) read() *metrics.Float64Histogram {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return &metrics.Float64Histogram{Counts: append([]uint64(nil), f.counts...), Buckets: fakeBuckets}
}

// The pacer opens a window after two intervals in a row in which goroutines waited a
// millisecond or more on average, doubles it while the process stays behind, up to
// MaxPaceWindow, keeps it while the waits are moderate, narrows it by a quarter for each
// interval that kept up, and closes it below 5 ms, and on Stop.
func TestPacerWidensWhileTheProcessIsBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lat := &fakeLatencies{counts: make([]uint64, len(fakeBuckets)-1)}
		reg := prometheus.NewRegistry()
		p := NewPacer(clockwork.NewRealClock(), 100*time.Millisecond, lat.read, NewMetrics(reg))
		ctx := t.Context()
		require.NoError(t, p.Start(ctx))
		synctest.Wait()
		interval := func(wait time.Duration) time.Duration {
			lat.add(wait, 100)
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			return p.Window()
		}
		// Each read as its bucket's lower bound: 2 ms, 500 µs, 100 µs.
		const behind, between, keepingUp = 4 * time.Millisecond, time.Millisecond, 200 * time.Microsecond

		require.Zero(t, interval(behind), "one slow interval: a collection, a slow statement")
		require.Zero(t, interval(keepingUp))
		require.Zero(t, interval(behind))
		require.Equal(t, 5*time.Millisecond, interval(behind), "two in a row: the window opens")
		require.Equal(t, 5e-3, metricValue(t, reg, "chatd_coalesce_window_seconds"))
		for _, want := range []time.Duration{10, 20, 40, 80, 100, 100} {
			require.Equal(t, want*time.Millisecond, interval(behind), "still behind: it doubles, up to the bound")
		}
		require.Equal(t, MaxPaceWindow, interval(between), "waits between the bounds: it keeps the window that let it catch up")
		require.Equal(t, 75*time.Millisecond, interval(keepingUp), "caught up: a quarter narrower")
		require.Equal(t, 75*time.Millisecond, interval(between))
		require.Equal(t, 100*time.Millisecond, interval(behind), "behind again: it widens at once")

		// Intervals in which nothing waited at all narrow it too, down to closed.
		closed := 0
		for w := p.Window(); w != 0; closed++ {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			require.Less(t, p.Window(), w)
			w = p.Window()
		}
		require.Equal(t, 11, closed, "100 ms narrowed by a quarter each interval is under 5 ms after 11")
		require.Zero(t, metricValue(t, reg, "chatd_coalesce_window_seconds"))

		interval(behind)
		require.NotZero(t, interval(behind))
		reads := lat.reads
		require.NoError(t, p.Stop(ctx))
		require.Zero(t, p.Window(), "a stopped pacer holds nothing back")
		require.Zero(t, metricValue(t, reg, "chatd_coalesce_window_seconds"))
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, reads, lat.reads, "it stopped reading")

		var none *Pacer
		require.Zero(t, none.Window(), "an actor without a pacer")
	})
}

// A histogram that changes shape starts the intervals again instead of misreading them,
// and a reader with nothing to read leaves the window as it is.
func TestPacerSkipsWhatItCannotRead(t *testing.T) {
	p := NewPacer(clockwork.NewFakeClock(), 0, func() *metrics.Float64Histogram { return nil }, nil)
	p.pass()
	require.Zero(t, p.Window())

	h := &metrics.Float64Histogram{Counts: []uint64{0, 0, 0}, Buckets: []float64{math.Inf(-1), 0, 1e-3, math.Inf(1)}}
	p.read = func() *metrics.Float64Histogram { return h }
	p.pass() // the first reading
	h.Counts = []uint64{0, 0, 100}
	p.pass()
	p.pass()
	require.Zero(t, p.Window(), "one interval behind, then one with nothing scheduled")
	// twoLate passes two intervals in which late goroutines waited in the last bucket.
	twoLate := func(late uint64) {
		for range 2 {
			h.Counts[2] += late
			p.pass()
		}
	}
	twoLate(40)
	require.Zero(t, p.Window(), "40 late goroutines an interval: too few to say the process is behind")
	twoLate(100)
	require.Equal(t, minPaceWindow, p.Window(), "1 ms, the last bucket's lower bound")
	h.Counts[0] += 1000
	p.pass()
	require.Zero(t, p.Window(), "underflow reads as 0: caught up, and 5 ms narrowed is closed")
	twoLate(100)
	require.Equal(t, minPaceWindow, p.Window())

	h = &metrics.Float64Histogram{Counts: []uint64{0, 1000, 0, 0}, Buckets: []float64{0, 1e-3, 2e-3, 3e-3, 1}}
	p.pass()
	require.Equal(t, minPaceWindow, p.Window(), "a new shape is a first reading again: not 1000 late goroutines")
}

// The runtime has the histogram the pacer reads, in the shape it expects: a runtime
// without it would leave adaptive coalescing without its window, silently.
func TestPacerReadsTheRuntimesSchedulingLatencies(t *testing.T) {
	h := readSchedLatencies()()
	require.NotNil(t, h)
	require.NotEmpty(t, h.Counts)
	require.Len(t, h.Buckets, len(h.Counts)+1)
	p := NewPacer(clockwork.NewFakeClock(), 0, nil, nil)
	p.pass()
	require.Len(t, p.last, len(h.Counts), "its first reading")
}
