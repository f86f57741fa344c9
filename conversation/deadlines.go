package conversation

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// Deadlines is a background service that runs one kind of deadline for every actor of a
// process (idle eviction, abandonment of unwatched runs) on one timer of its clock: the
// earliest deadline's. An actor arms and disarms its deadline as its state changes, as
// it would a timer of its own; the service fires it, exactly on time, by waking the
// actor, which then decides (an actor that became busy meanwhile ignores the fire).
//
// Run as a service (Start, Stop), the work of a kind has one owner that can be stopped,
// and later one place that knows which sessions this node may act on. Deadlines armed
// before Start wait for it; after Stop none fires.
type Deadlines struct {
	name  string
	clock clockwork.Clock

	mu      sync.Mutex
	queue   deadlineHeap
	timer   clockwork.Timer // for the earliest deadline, while started
	at      time.Time       // when timer fires
	started bool
	stopped bool
	firing  sync.WaitGroup // callbacks running
}

// NewDeadlines returns an unstarted service for deadlines of kind name ("eviction",
// "abandonment"), timed on clock (the real clock when nil).
func NewDeadlines(name string, clock clockwork.Clock) *Deadlines {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Deadlines{name: name, clock: clock}
}

// Name returns the kind of deadline the service runs.
func (d *Deadlines) Name() string { return d.name }

// Start begins firing deadlines, including those armed before.
func (d *Deadlines) Start(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return fmt.Errorf("%s deadlines: started after Stop", d.name)
	}
	d.started = true
	d.reschedule()
	return nil
}

// Stop fires no deadline any more and returns once the callbacks that were running have
// returned, or ctx ends.
func (d *Deadlines) Stop(ctx context.Context) error {
	d.mu.Lock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	for _, dl := range d.queue {
		dl.index = -1 // dropped: its Stop reports false
	}
	d.queue = nil
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		d.firing.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s deadlines: %w", d.name, ctx.Err())
	}
}

// Len returns how many deadlines are armed.
func (d *Deadlines) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queue)
}

// deadline is one armed deadline; it is the handle AfterFunc returns.
type deadline struct {
	d     *Deadlines
	at    time.Time
	f     func()
	index int // in the heap; -1 once fired or stopped
}

// AfterFunc arms a deadline dur from now that calls f in its own goroutine, as
// clockwork.Clock's AfterFunc does. Stop disarms it.
func (d *Deadlines) AfterFunc(dur time.Duration, f func()) stopper {
	dl := &deadline{d: d, at: d.clock.Now().Add(dur), f: f, index: -1}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return dl
	}
	heap.Push(&d.queue, dl)
	d.reschedule()
	return dl
}

// Stop disarms the deadline; it reports whether it was still armed.
func (dl *deadline) Stop() bool {
	d := dl.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if dl.index < 0 {
		return false
	}
	heap.Remove(&d.queue, dl.index)
	d.reschedule()
	return true
}

// reschedule points the clock timer at the earliest deadline. d.mu must be held.
func (d *Deadlines) reschedule() {
	if !d.started || d.stopped {
		return
	}
	if len(d.queue) == 0 {
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		return
	}
	first := d.queue[0].at
	if d.timer != nil && d.at.Equal(first) {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.at = first
	d.timer = d.clock.AfterFunc(first.Sub(d.clock.Now()), d.fire)
}

// fire calls every deadline that is due and arms the timer for the next one.
func (d *Deadlines) fire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	d.timer = nil
	now := d.clock.Now()
	for len(d.queue) > 0 && !d.queue[0].at.After(now) {
		dl := heap.Pop(&d.queue).(*deadline)
		d.firing.Add(1)
		go func() {
			defer d.firing.Done()
			dl.f()
		}()
	}
	d.reschedule()
}

// deadlineHeap orders deadlines by time (container/heap).
type deadlineHeap []*deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *deadlineHeap) Push(x any) {
	dl := x.(*deadline)
	dl.index = len(*h)
	*h = append(*h, dl)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old)
	dl := old[n-1]
	old[n-1] = nil
	dl.index = -1
	*h = old[:n-1]
	return dl
}
