package conversation

import "github.com/google/uuid"

// ring keeps the most recent events for replay, bounded by a count and a total size in
// bytes: each event's payload (Event.size) plus the encodings it had when it was pushed
// (those of its live subscribers). It holds the events themselves, not one wire format:
// each transport encodes a replayed event in its own format, and the encoding an event
// cached when it was live is reused. (An event encoded in a new format only by a later
// replay grows by that encoding uncounted: at most one more copy per format.) The newest
// event is always kept, even when it alone is over the byte bound, so a replay is never
// refused just because one event was large.
//
// Deltas (chat.delta, tool.output), nearly every event of a streaming run, are kept
// compact: their text and the ids they share with the deltas around them, not the event
// with its encodings. An answer of thousands of tokens would otherwise keep thousands of
// events of a few hundred bytes each, full of pointers, live on the heap until the next
// run pushes them out, and every garbage collection would mark them all (at 9,000 tabs
// on 16 cores that was over a gigabyte, and marking it held tokens back by tens of
// milliseconds). A replay builds those events again and encodes them anew.
type ring struct {
	maxEvents int
	maxBytes  int

	buf    []ringEntry // circular once it reaches maxEvents
	head   int         // index of the oldest entry
	n      int
	bytes  int
	oldest int64 // the oldest entry's seq (entries hold consecutive seqs)

	// last is the ids of the newest compact delta, shared with the next while they are
	// the same.
	last *deltaIDs

	evicted int64 // events pushed out so far
}

// ringEntry is one event: ev, or a compact delta (ev nil) of text and ids.
type ringEntry struct {
	ev   *Event
	text string
	ids  *deltaIDs
	size int
}

// deltaIDs is what consecutive deltas of one message have in common.
type deltaIDs struct {
	typ       EventType
	runID     uuid.UUID
	requestID string
	messageID uuid.UUID
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes}
}

// push appends ev, whose seq must be one more than the previous push's.
func (r *ring) push(ev *Event) {
	var e ringEntry
	if ev.delta() {
		ids := deltaIDs{typ: ev.Type, runID: ev.RunID, requestID: ev.RequestID, messageID: ev.MessageID}
		if r.last == nil || *r.last != ids {
			r.last = new(deltaIDs) // ids itself would move to the heap on every push
			*r.last = ids
		}
		e = ringEntry{text: ev.Text, ids: r.last, size: ev.size()}
	} else {
		e = ringEntry{ev: ev, size: ev.size() + ev.encodedBytes()}
	}
	for r.n > 0 && (r.n >= r.maxEvents || r.bytes+e.size > r.maxBytes) {
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
	if r.n == 0 {
		r.oldest = ev.Seq
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
	r.bytes += e.size
}

// forget drops every event and the buffer that held them, and returns their size: a
// quiet session's ring (a long answer is thousands of events) costs nothing until the
// next event. A later since for an older seq finds them gone (a snapshot); one at the
// head still finds nothing missing.
func (r *ring) forget() int {
	n := r.bytes
	r.buf, r.head, r.n, r.bytes, r.last = nil, 0, 0, 0, nil
	return n
}

func (r *ring) dropOldest() {
	e := &r.buf[r.head]
	r.bytes -= e.size
	*e = ringEntry{} // let the event and its encodings be collected
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.oldest++
	r.evicted++
}

// since returns every event after lastSeq, up to the newest, and their total size. ok is
// false when some of those events are no longer held (or lastSeq is beyond the newest,
// which only a confused client sends). head is the newest seq pushed, which the caller
// knows and passes in so an empty ring can still answer. Compact deltas come back as new
// events, with no encodings yet.
func (r *ring) since(lastSeq, head int64) (events []*Event, size int, ok bool) {
	if lastSeq > head || lastSeq < 0 {
		return nil, 0, false
	}
	if lastSeq == head {
		return nil, 0, true
	}
	if r.n == 0 || lastSeq+1 < r.oldest {
		return nil, 0, false
	}
	start := int(lastSeq + 1 - r.oldest)
	compact := 0
	for i := start; i < r.n; i++ {
		if r.buf[(r.head+i)%len(r.buf)].ev == nil {
			compact++
		}
	}
	built := make([]publishedEvent, compact) // one allocation for every rebuilt delta
	events = make([]*Event, 0, r.n-start)
	for i := start; i < r.n; i++ {
		e := &r.buf[(r.head+i)%len(r.buf)]
		size += e.size
		if e.ev != nil {
			events = append(events, e.ev)
			continue
		}
		p := &built[0]
		built = built[1:]
		p.Event = Event{Seq: r.oldest + int64(i), Type: e.ids.typ, RunID: e.ids.runID, RequestID: e.ids.requestID, MessageID: e.ids.messageID, Text: e.text}
		p.Event.enc = &p.enc
		events = append(events, &p.Event)
	}
	return events, size, true
}
