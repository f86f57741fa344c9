package conversation

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/service"
)

// Defaults of a MemoryReturner.
const (
	DefaultMemoryReturnInterval  = 10 * time.Second
	DefaultMemoryReturnThreshold = 32 << 20
)

// MemoryReturner hands back to the system the memory that quiet conversations dropped
// (Config.QuietRelease). After a reconnect storm (a deploy: every tab asks for a
// snapshot at once) the actors hold thousands of histories; a minute later they drop
// them, but Go's runtime returns freed pages only gradually, so the process would keep
// the storm's peak for minutes. Each interval, if quiet conversations dropped at least
// the threshold's worth of messages and replay rings since the last return, or at least 1 MiB and then
// nothing more for an interval (a burst of drops is over), the returner has the runtime
// collect and return what is free at once (debug.FreeOSMemory): at most one collection
// an interval, and only after such a release.
//
// It is a service.Service: Start and Stop. Actors report what they drop through
// Config.Memory.
type MemoryReturner struct {
	clock     clockwork.Clock
	interval  time.Duration
	threshold int64
	free      func()
	metrics   *Metrics

	released atomic.Int64
	seen     int64 // released at the last pass
	loop     service.Loop
}

// memoryReturnMin is the least a burst of drops that ended must have dropped to be
// returned before the threshold is reached.
const memoryReturnMin = 1 << 20

// NewMemoryReturner returns a returner that looks every interval (0:
// DefaultMemoryReturnInterval) and returns memory once threshold bytes (0:
// DefaultMemoryReturnThreshold) were dropped. free returns it (nil: debug.FreeOSMemory);
// metrics counts the returns (nil: not counted).
func NewMemoryReturner(clock clockwork.Clock, interval time.Duration, threshold int, free func(), metrics *Metrics) *MemoryReturner {
	if interval <= 0 {
		interval = DefaultMemoryReturnInterval
	}
	if threshold <= 0 {
		threshold = DefaultMemoryReturnThreshold
	}
	if free == nil {
		free = debug.FreeOSMemory
	}
	return &MemoryReturner{clock: clock, interval: interval, threshold: int64(threshold), free: free, metrics: metrics}
}

// dropped counts n bytes of messages an actor let go of. Safe on a nil returner.
func (m *MemoryReturner) dropped(n int) {
	if m != nil {
		m.released.Add(int64(n))
	}
}

// Start starts looking.
func (m *MemoryReturner) Start(context.Context) error {
	return m.loop.Start(func(stop <-chan struct{}) {
		service.Every(stop, m.clock, m.interval, func(context.Context) { m.pass() })
	})
}

// Stop stops looking.
func (m *MemoryReturner) Stop(ctx context.Context) error { return m.loop.Stop(ctx) }

func (m *MemoryReturner) pass() {
	dropped := m.released.Load()
	ended := dropped == m.seen // nothing dropped since the last pass: a burst is over
	m.seen = dropped
	if dropped < m.threshold && (!ended || dropped < memoryReturnMin) {
		return
	}
	m.released.Add(-dropped)
	m.seen = 0
	m.free()
	if m.metrics != nil {
		m.metrics.memoryReturned.Inc()
	}
}
