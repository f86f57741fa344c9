package conversation

import (
	"math"
	"strings"

	"github.com/google/uuid"
)

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
// compact: a run of consecutive deltas of one message is one entry, the ids they share
// and where each delta's text ends in the message's own text (4 bytes a delta), which
// the message keeps anyway. An answer of thousands of tokens would otherwise keep
// thousands of events, or of small entries full of pointers, live on the heap until the
// next run pushes them out, and every garbage collection would mark them all (at 9,000
// tabs on 16 cores that was hundreds of megabytes, and marking it held tokens back by
// tens of milliseconds). A replay builds those events again and encodes them anew.
type ring struct {
	maxEvents int
	maxBytes  int

	buf     []ringEntry // circular once it holds as many entries as it can
	head    int         // index of the oldest entry
	entries int
	n       int // events held (a run of deltas is one entry and many events)
	bytes   int
	oldest  int64 // the oldest event's seq (events hold consecutive seqs)

	evicted int64 // events pushed out so far
}

// ringEntry is one event kept whole (ev), or a run of compact deltas.
type ringEntry struct {
	ev   *Event
	run  *deltaRun
	size int // ev's; a run counts each delta's (deltaRun.size)
}

// deltaRun is consecutive deltas of one message, each the next piece of its text.
type deltaRun struct {
	ids  deltaIDs
	text *strings.Builder // the message's text, which only grows
	// offs[i] and offs[i+1] bound the text of delta i; the deltas before first were
	// evicted.
	offs  []uint32
	first int
}

// deltaIDs is what consecutive deltas of one message have in common.
type deltaIDs struct {
	typ       EventType
	runID     uuid.UUID
	requestID string
	messageID uuid.UUID
}

// len is how many deltas the run holds.
func (d *deltaRun) len() int { return len(d.offs) - 1 - d.first }

// size is delta i's Event.size.
func (d *deltaRun) size(i int) int {
	return eventOverhead + int(d.offs[i+1]-d.offs[i]) + len(d.ids.requestID)
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes}
}

// push appends ev, whose seq must be one more than the previous push's, and reports
// whether the ring keeps ev itself (or only a compact copy of a delta).
func (r *ring) push(ev *Event) (kept bool) {
	start, end, compact := span(ev)
	size := ev.size()
	if !compact {
		size += ev.encodedBytes()
	}
	for r.n > 0 && (r.n >= r.maxEvents || r.bytes+size > r.maxBytes) {
		r.dropOldest()
	}
	if r.n == 0 {
		r.oldest = ev.Seq
	}
	r.n++
	r.bytes += size
	if !compact {
		r.add(ringEntry{ev: ev, size: size})
		return true
	}
	ids := deltaIDs{typ: ev.Type, runID: ev.RunID, requestID: ev.RequestID, messageID: ev.MessageID}
	if r.entries > 0 {
		last := r.buf[(r.head+r.entries-1)%len(r.buf)].run
		if last != nil && last.text == ev.src && last.offs[len(last.offs)-1] == start && last.ids == ids {
			last.offs = append(last.offs, end)
			return false
		}
	}
	offs := make([]uint32, 2, 16)
	offs[0], offs[1] = start, end
	r.add(ringEntry{run: &deltaRun{ids: ids, text: ev.src, offs: offs}})
	return false
}

// span reports where a delta's text lies in its message's text (Event.src), when the
// ring can keep it as that span.
func span(ev *Event) (start, end uint32, ok bool) {
	if ev.src == nil || !ev.delta() {
		return 0, 0, false
	}
	s := ev.src.String()
	n := len(s)
	if uint64(n) > math.MaxUint32 || n < len(ev.Text) || s[n-len(ev.Text):] != ev.Text {
		return 0, 0, false // the same bytes: a slice of s, so this compares pointers
	}
	return uint32(n - len(ev.Text)), uint32(n), true
}

// add appends an entry, growing the buffer when every slot is used. Entries never
// outnumber events, and push made room for one more event, so the buffer never needs
// more than maxEvents slots.
func (r *ring) add(e ringEntry) {
	if r.entries == len(r.buf) {
		// Double the buffer (up to maxEvents), putting the entries back in order so it
		// can wrap again.
		grown := make([]ringEntry, min(max(2*r.entries, 16), r.maxEvents))
		for i := range r.entries {
			grown[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf = grown
		r.head = 0
	}
	r.buf[(r.head+r.entries)%len(r.buf)] = e
	r.entries++
}

// forget drops every event and the buffer that held them, and returns their size: a
// quiet session's ring (a long answer is thousands of events) costs nothing until the
// next event. A later since for an older seq finds them gone (a snapshot); one at the
// head still finds nothing missing.
func (r *ring) forget() int {
	n := r.bytes
	r.buf, r.head, r.entries, r.n, r.bytes = nil, 0, 0, 0, 0
	return n
}

func (r *ring) dropOldest() {
	r.n--
	r.oldest++
	r.evicted++
	e := &r.buf[r.head]
	if d := e.run; d != nil {
		r.bytes -= d.size(d.first)
		d.first++
		if d.len() > 0 {
			if d.first >= 64 && 2*d.first >= len(d.offs) {
				// Slide the offsets down, so a long run evicted from the front does not
				// grow without bound.
				n := copy(d.offs, d.offs[d.first:])
				d.offs, d.first = d.offs[:n], 0
			}
			return
		}
	} else {
		r.bytes -= e.size
	}
	*e = ringEntry{} // let the event and its encodings be collected
	r.head = (r.head + 1) % len(r.buf)
	r.entries--
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
	want := r.n - int(lastSeq+1-r.oldest)
	// Walk back from the newest entry to the one the replay starts in.
	first, skip, compact := r.entries, 0, 0
	for left := want; left > 0; {
		first--
		e := &r.buf[(r.head+first)%len(r.buf)]
		if e.run == nil {
			left--
			continue
		}
		k := min(e.run.len(), left)
		compact += k
		left -= k
		skip = e.run.len() - k
	}
	built := make([]publishedEvent, compact) // one allocation for every rebuilt delta
	events = make([]*Event, 0, want)
	seq := lastSeq
	for i := first; i < r.entries; i++ {
		e := &r.buf[(r.head+i)%len(r.buf)]
		if e.run == nil {
			seq++
			events = append(events, e.ev)
			size += e.size
			continue
		}
		d := e.run
		text := d.text.String()
		for j := d.first + skip; j < len(d.offs)-1; j++ {
			seq++
			p := &built[0]
			built = built[1:]
			p.Event = Event{Seq: seq, Type: d.ids.typ, RunID: d.ids.runID, RequestID: d.ids.requestID, MessageID: d.ids.messageID, Text: text[d.offs[j]:d.offs[j+1]]}
			p.Event.enc = &p.enc
			events = append(events, &p.Event)
			size += d.size(j)
		}
		skip = 0
	}
	return events, size, true
}
