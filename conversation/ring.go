package conversation

// ring keeps the most recent encoded events for replay, bounded by a count and a total
// size in bytes. The newest event is always kept, even when it alone is over the byte
// bound, so a replay is never refused just because one frame was large.
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
	seq   int64
	frame []byte
}

func newRing(maxEvents, maxBytes int) *ring {
	return &ring{maxEvents: maxEvents, maxBytes: maxBytes}
}

// push appends the event with seq, which must be one more than the previous push.
func (r *ring) push(seq int64, frame []byte) {
	for r.n > 0 && (r.n >= r.maxEvents || r.bytes+len(frame) > r.maxBytes) {
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
	r.buf[(r.head+r.n)%len(r.buf)] = ringEntry{seq, frame}
	r.n++
	r.bytes += len(frame)
}

func (r *ring) dropOldest() {
	e := &r.buf[r.head]
	r.bytes -= len(e.frame)
	*e = ringEntry{} // let the frame be collected
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.evicted++
}

// since returns the frames of every event after lastSeq, up to the newest, and their
// total size. ok is false when some of those events are no longer held (or lastSeq is
// beyond the newest, which only a confused client sends). head is the newest seq pushed,
// which the caller knows and passes in so an empty ring can still answer.
func (r *ring) since(lastSeq, head int64) (frames [][]byte, size int, ok bool) {
	if lastSeq > head || lastSeq < 0 {
		return nil, 0, false
	}
	if lastSeq == head {
		return nil, 0, true
	}
	if r.n == 0 {
		return nil, 0, false
	}
	oldest := r.buf[r.head].seq
	if lastSeq+1 < oldest {
		return nil, 0, false
	}
	start := int(lastSeq + 1 - oldest)
	frames = make([][]byte, 0, r.n-start)
	for i := start; i < r.n; i++ {
		f := r.buf[(r.head+i)%len(r.buf)].frame
		frames = append(frames, f)
		size += len(f)
	}
	return frames, size, true
}
