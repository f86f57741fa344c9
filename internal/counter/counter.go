// Package counter has a counter that many goroutines, on many cores, add to at once
// without contending for one cache line.
//
// A prometheus counter is one atomic word: at hundreds of thousands of adds a second
// from every core (a count per frame written, per event published), each add waits for
// the line to move from the core that added last. Here each adder (a connection, a
// session's actor) is given one of a few dozen slots, each on its own cache line, and a
// read sums them.
package counter

import "sync/atomic"

// slots is how many lines the adds spread over: more than the cores of any machine we
// run on, so that busy adders rarely share one.
const slots = 64

// Sharded is a counter of uint64s. The zero value counts from 0.
type Sharded struct {
	slots [slots]Slot
	next  atomic.Uint32
}

// Slot is the part of a Sharded one adder adds to.
type Slot struct {
	n atomic.Uint64
	_ [56]byte // the rest of its cache line
}

// Slot returns the slot for a new adder: the next one in turn.
func (c *Sharded) Slot() *Slot {
	return &c.slots[(c.next.Add(1)-1)%slots]
}

// Add adds n.
func (s *Slot) Add(n uint64) { s.n.Add(n) }

// Load returns the sum of every slot. Adds made meanwhile may or may not be in it.
func (c *Sharded) Load() uint64 {
	var n uint64
	for i := range c.slots {
		n += c.slots[i].n.Load()
	}
	return n
}
