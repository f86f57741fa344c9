package conversation

import (
	"context"
	"math"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/service"
)

// Adaptive coalescing's window (see Pacer).
const (
	// DefaultPaceInterval is how often a Pacer looks at the scheduler.
	DefaultPaceInterval = 100 * time.Millisecond
	// MaxPaceWindow bounds the window a Pacer opens: the most a token is held back
	// while the process is behind.
	MaxPaceWindow = 100 * time.Millisecond
	// minPaceWindow is the window a Pacer opens first, and the least it keeps open:
	// below it, merging saves little.
	minPaceWindow = 5 * time.Millisecond
	// paceBehind: a mean wait of runnable goroutines at least this long over an
	// interval means the process is behind. A process that keeps up waits tens to
	// hundreds of microseconds; a saturated one milliseconds.
	paceBehind = time.Millisecond
	// paceCaughtUp: a mean wait below this means it has caught up, and the window
	// narrows. Between the two it stays as it is, so that the window that let the
	// process catch up is kept while it keeps up.
	paceCaughtUp = 250 * time.Microsecond
	// paceStartAfter is how many intervals in a row must be behind before a window
	// opens: a collection or a slow statement makes one interval slow, not two.
	paceStartAfter = 2
	// paceMinSamples: an interval with fewer goroutines scheduled says nothing (the
	// runtime samples about one in eight): in a nearly idle process one long wait would
	// make the mean. It counts as keeping up.
	paceMinSamples = 50
)

// Pacer widens adaptive coalescing (CoalesceAdaptive) while the whole process is behind.
// Adaptive coalescing alone merges what queued behind one session's actor; but once a
// process is saturated its work waits in the scheduler's run queue rather than in any
// one actor's inbox, and every token still costs a frame to each tab, so it stays
// behind. Each interval the Pacer reads how long runnable goroutines waited to run (the
// runtime's /sched/latencies histogram). Two intervals in a row with a mean wait of a
// millisecond or more open a window of 5 ms, each further one doubles it, up to
// MaxPaceWindow; an interval whose mean is under a quarter of a millisecond narrows
// it by a quarter, and it closes below 5 ms. While it is open, actors in adaptive
// mode hold a session's text for the window, as the fixed window does: fewer, larger
// frames, so the process catches up. A process that keeps up never opens one and adds
// no latency. The window is the process's own: each node of a cluster paces itself.
//
// It is a service.Service: Start and Stop. Actors read it through Config.Pacer.
type Pacer struct {
	clock    clockwork.Clock
	interval time.Duration
	read     func() *metrics.Float64Histogram
	metrics  *Metrics

	window atomic.Int64 // nanoseconds
	behind int          // intervals in a row that were behind
	last   []uint64     // the histogram's counts at the last pass
	loop   service.Loop
}

// NewPacer returns a pacer that looks every interval (0: DefaultPaceInterval). read
// returns the cumulative histogram of scheduling latencies (nil: the runtime's
// /sched/latencies:seconds); metrics shows the window (nil: not shown).
func NewPacer(clock clockwork.Clock, interval time.Duration, read func() *metrics.Float64Histogram, m *Metrics) *Pacer {
	if interval <= 0 {
		interval = DefaultPaceInterval
	}
	if read == nil {
		read = readSchedLatencies()
	}
	return &Pacer{clock: clock, interval: interval, read: read, metrics: m}
}

// readSchedLatencies returns a reader of the runtime's scheduling latencies.
func readSchedLatencies() func() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	return func() *metrics.Float64Histogram {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindFloat64Histogram {
			return nil // a runtime without it: never behind
		}
		return s[0].Value.Float64Histogram()
	}
}

// Window returns how long actors in adaptive mode hold text now; 0 while the process
// keeps up. Safe on a nil Pacer (0).
func (p *Pacer) Window() time.Duration {
	if p == nil {
		return 0
	}
	return time.Duration(p.window.Load())
}

// Start starts looking; its first reading is where the first interval starts.
func (p *Pacer) Start(context.Context) error {
	return p.loop.Start(func(stop <-chan struct{}) {
		// Closed by the loop itself as it ends, after its last pass, so that a Stop
		// whose context ends first cannot leave it open.
		defer p.set(0)
		service.Every(stop, p.clock, p.interval, func(context.Context) { p.pass() })
	})
}

// Stop stops looking and closes the window.
func (p *Pacer) Stop(ctx context.Context) error { return p.loop.Stop(ctx) }

// pass reads the latencies of the interval that ended and moves the window.
func (p *Pacer) pass() {
	h := p.read()
	if h == nil {
		return
	}
	mean, ok := p.intervalMean(h)
	if !ok {
		return
	}
	w := p.Window()
	switch {
	case mean >= paceBehind:
		if p.behind++; p.behind < paceStartAfter && w == 0 {
			return
		}
		w = min(max(2*w, minPaceWindow), MaxPaceWindow)
	case mean < paceCaughtUp:
		p.behind = 0
		if w -= w / 4; w < minPaceWindow {
			w = 0
		}
	default:
		p.behind = 0
	}
	p.set(w)
}

// intervalMean returns the mean latency of what was scheduled since the last pass; an
// interval with less than paceMinSamples scheduled has a mean of 0. ok is false on the
// first pass, or when the histogram's shape changed.
func (p *Pacer) intervalMean(h *metrics.Float64Histogram) (time.Duration, bool) {
	if len(p.last) != len(h.Counts) || len(h.Buckets) != len(h.Counts)+1 {
		p.last = append(p.last[:0], h.Counts...)
		return 0, false
	}
	var n uint64
	var sum float64
	for i, c := range h.Counts {
		d := c - p.last[i]
		p.last[i] = c
		if d == 0 {
			continue
		}
		// The bucket's lower bound, or its upper one for an underflow bucket (from
		// -Inf): the mean errs low, so a window opens only for a wait surely that long.
		v := h.Buckets[i]
		if math.IsInf(v, -1) {
			v = h.Buckets[i+1]
		}
		if math.IsInf(v, 0) || math.IsNaN(v) {
			continue // a bucket without a finite bound says nothing of the wait
		}
		n += d
		sum += float64(d) * max(v, 0)
	}
	if n < paceMinSamples {
		return 0, true
	}
	return time.Duration(sum / float64(n) * float64(time.Second)), true
}

func (p *Pacer) set(w time.Duration) {
	p.window.Store(int64(w))
	if p.metrics != nil {
		p.metrics.paceWindow.Set(w.Seconds())
	}
}
