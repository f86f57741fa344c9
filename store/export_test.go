package store

// GroupHold holds every batch place of a store's grouped writes (group.go), so that the
// writes made meanwhile queue: a test decides what one batch holds, and in which order.
type GroupHold struct {
	g *groupDB
	// Queued receives once for each write that joins the queue.
	Queued chan struct{}
}

// HoldGroup takes every batch place of s's grouped writes; none may be in flight.
func HoldGroup(s *Store) *GroupHold {
	g := s.w.(*groupDB)
	h := &GroupHold{g: g, Queued: make(chan struct{}, groupMaxBatch)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight != 0 {
		panic("store: HoldGroup with batches in flight")
	}
	g.inFlight = g.max
	g.queued = func() { h.Queued <- struct{}{} }
	return h
}

// Len returns how many writes are queued.
func (h *GroupHold) Len() int {
	h.g.mu.Lock()
	defer h.g.mu.Unlock()
	return len(h.g.queue)
}

// Release sends what is queued as one batch, in the order it queued (row reads first),
// and gives the places back once it is stored.
func (h *GroupHold) Release() {
	g := h.g
	g.mu.Lock()
	g.queued = nil
	if len(g.queue) == 0 {
		g.inFlight = 0
		g.mu.Unlock()
		return
	}
	g.inFlight = 1 // the batch's, which send gives back
	batch := g.take()
	g.mu.Unlock()
	g.send(batch)
}
