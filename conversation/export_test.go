package conversation

import "time"

// Dropped is how many bytes of messages quiet actors reported dropping since the last
// return.
func (m *MemoryReturner) Dropped() int64 { return m.released.Load() }

// SetWindow opens the pacer's window (0 closes it), as its passes would.
func (p *Pacer) SetWindow(d time.Duration) { p.set(d) }

// EventOverhead is what the ring counts for an event beyond its text.
const EventOverhead = eventOverhead

// HoldTurn keeps the actor from handling anything, in a pass of its loop or inline, until
// release is called.
func (a *Actor) HoldTurn() (release func()) {
	a.turn.Lock()
	return a.turn.Unlock
}

// Inlined is how many intents the actor has handled on their senders' goroutines.
func (a *Actor) Inlined() int {
	a.turn.Lock()
	defer a.turn.Unlock()
	return a.inlined
}

// KnowRequestHash has the actor take id's hash for a known run's, as a new id whose hash
// is another's would be.
func (a *Actor) KnowRequestHash(id string) {
	a.turn.Lock()
	defer a.turn.Unlock()
	a.journal.addRequest(id)
}

// OnParked has the actors started with c call f each time their loop gives its goroutine
// back.
func OnParked(c *Config, f func()) { c.onParked = f }

// Parked reports whether the actor's loop has no goroutine now.
func (a *Actor) Parked() bool { return a.loopState.Load() == loopParked }
