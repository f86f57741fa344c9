package conversation

// ring keeps the most recent events for replay, bounded by a count and a total size in
// bytes: each event's payload (Event.size) plus the encodings it had when it was pushed
// (those of its live subscribers). It holds the events themselves, not one wire format:
// each transport encodes a replayed event in its own format, and the encoding an event
// cached when it was live is reused. (An event encoded in a new format only by a later
// replay grows by that encoding uncounted: at most one more copy per format.) The newest
// event is always kept, even when it alone is over the byte bound, so a replay is never
// refused just because one event was large.
type ring struct {
	maxEvents int
	maxBytes  int

	buf   []ringEntry // circular once it reaches maxEvents
	head  int         // index of the oldest entry
	n     int
	bytes int

	evicted int64 // events pushed out so far
}

type ringEntry struct {
	ev   *Event
	size int
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes}
}

// push appends ev, whose seq must be one more than the previous push's.
func (r *ring) push(ev *Event) {
	size := ev.size() + ev.encodedBytes()
	for r.n > 0 && (r.n >= r.maxEvents || r.bytes+size > r.maxBytes) {
		r.dropOldest()
	}
	if r.n == len(r.buf) {
		// Every slot is used and, after the loop above, n < maxEvents: double the buffer
		// (up to maxEvents), putting the entries back in order so it can wrap again.
		grown := make([]ringEntry, min(max(2*r.n, 16), r.maxEvents))
		for i := range r.n {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf = grown
		r.head = 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = ringEntry{ev, size}
	r.n++
	r.bytes += size
}

// forget drops every event and the buffer that held them, and returns their size: a
// quiet session's ring (a long answer is thousands of events) costs nothing until the
// next event. A later since for an older seq finds them gone (a snapshot); one at the
// head still finds nothing missing.
func (r *ring) forget() int {
	n := r.bytes
	r.buf, r.head, r.n, r.bytes = nil, 0, 0, 0
	return n
}

func (r *ring) dropOldest() {
	e := &r.buf[r.head]
	r.bytes -= e.size
	*e = ringEntry{} // let the event and its encodings be collected
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.evicted++
}

// since returns every event after lastSeq, up to the newest, and their total size. ok is
// false when some of those events are no longer held (or lastSeq is beyond the newest,
// which only a confused client sends). head is the newest seq pushed, which the caller
// knows and passes in so an empty ring can still answer.
func (r *ring) since(lastSeq, head int64) (events []*Event, size int, ok bool) {
	if lastSeq > head || lastSeq < 0 {
		return nil, 0, false
	}
	if lastSeq == head {
		return nil, 0, true
	}
	if r.n == 0 {
		return nil, 0, false
	}
	oldest := r.buf[r.head].ev.Seq
	if lastSeq+1 < oldest {
		return nil, 0, false
	}
	start := int(lastSeq + 1 - oldest)
	events = make([]*Event, 0, r.n-start)
	for i := start; i < r.n; i++ {
		e := r.buf[(r.head+i)%len(r.buf)]
		events = append(events, e.ev)
		size += e.size
	}
	return events, size, true
}
