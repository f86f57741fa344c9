package conversation

import "time"

// Dropped is how many bytes of messages quiet actors reported dropping since the last
// return.
func (m *MemoryReturner) Dropped() int64 { return m.released.Load() }

// SetWindow opens the pacer's window (0 closes it), as its passes would.
func (p *Pacer) SetWindow(d time.Duration) { p.set(d) }

// EventOverhead is what the ring counts for an event beyond its text.
const EventOverhead = eventOverhead
