package conversation

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chatd/chatd/chat"
	"github.com/google/uuid"

	"github.com/stretchr/testify/require"
)

// o is what every event weighs beyond its text; the sizes below count text only.
const o = eventOverhead

// textEvent returns event seq whose text is size bytes, so its size is o+size.
func textEvent(seq int64, size int) *Event {
	b := []byte(fmt.Sprintf("%d:", seq))
	for len(b) < size {
		b = append(b, '.')
	}
	return &Event{Seq: seq, Type: EventDelta, Text: string(b)}
}

// texts returns the events' texts, to compare them with what was pushed.
func texts(evs []*Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Text
	}
	return out
}

func TestRingBoundedByCount(t *testing.T) {
	r := newRing(3, 1<<20)
	for seq := int64(1); seq <= 5; seq++ {
		r.push(textEvent(seq, 4))
	}
	_, _, ok := r.since(1, 5)
	require.False(t, ok, "seq 2 was evicted")
	evs, size, ok := r.since(2, 5)
	require.True(t, ok)
	require.Equal(t, texts([]*Event{textEvent(3, 4), textEvent(4, 4), textEvent(5, 4)}), texts(evs))
	require.Equal(t, 3*(o+4), size)
	require.EqualValues(t, 2, r.evicted)

	evs, _, ok = r.since(5, 5)
	require.True(t, ok)
	require.Empty(t, evs)

	_, _, ok = r.since(6, 5)
	require.False(t, ok, "a seq beyond the head is not replayable")
}

func TestRingBoundedByBytes(t *testing.T) {
	r := newRing(100, 2*o+25)
	for seq := int64(1); seq <= 4; seq++ {
		r.push(textEvent(seq, 10))
	}
	// o+10 bytes each, 2o+25 allowed: only the newest two fit.
	require.Equal(t, 2, r.n)
	require.Equal(t, 2*(o+10), r.bytes)
	evs, _, ok := r.since(2, 4)
	require.True(t, ok)
	require.Equal(t, texts([]*Event{textEvent(3, 10), textEvent(4, 10)}), texts(evs))

	// An event larger than the bound on its own replaces everything and is kept.
	r.push(textEvent(5, 2*o+40))
	require.Equal(t, 1, r.n)
	evs, _, ok = r.since(4, 5)
	require.True(t, ok)
	require.Equal(t, texts([]*Event{textEvent(5, 2*o+40)}), texts(evs))
	_, _, ok = r.since(3, 5)
	require.False(t, ok)
}

func TestRingEmpty(t *testing.T) {
	r := newRing(4, 100)
	evs, _, ok := r.since(0, 0)
	require.True(t, ok)
	require.Empty(t, evs)
	_, _, ok = r.since(0, 3)
	require.False(t, ok, "events 1-3 were never held")
}

// A forgotten ring holds nothing and no buffer; it answers a subscriber at the head as
// caught up and one behind as too far behind, and takes the next events as a new ring.
func TestRingForget(t *testing.T) {
	r := newRing(4, 1<<20)
	for seq := int64(1); seq <= 6; seq++ { // wrapped: head is not at the buffer's start
		r.push(textEvent(seq, 4))
	}
	require.Equal(t, 4*(o+4), r.forget())
	require.Zero(t, r.n)
	require.Zero(t, r.bytes)
	require.Nil(t, r.buf, "its buffer goes too")
	require.EqualValues(t, 2, r.evicted, "forgetting is not evicting")

	evs, _, ok := r.since(6, 6)
	require.True(t, ok)
	require.Empty(t, evs)
	_, _, ok = r.since(5, 6)
	require.False(t, ok, "seq 6 is gone")

	for seq := int64(7); seq <= 12; seq++ {
		r.push(textEvent(seq, 4))
	}
	_, _, ok = r.since(6, 12)
	require.False(t, ok, "7 and 8 were pushed out by count")
	evs, _, ok = r.since(8, 12)
	require.True(t, ok)
	require.Equal(t, texts([]*Event{textEvent(9, 4), textEvent(10, 4), textEvent(11, 4), textEvent(12, 4)}), texts(evs))
}

// The circular buffer must keep order across many wrap-arounds and mixed evictions.
func TestRingWrapsInOrder(t *testing.T) {
	const limit = 4*o + 60
	r := newRing(7, limit)
	var seq int64
	for i := 0; i < 500; i++ {
		seq++
		r.push(textEvent(seq, 3+i%9))
		oldest := seq - int64(r.n) + 1
		evs, _, ok := r.since(oldest-1, seq)
		require.True(t, ok)
		require.Len(t, evs, r.n)
		for j, e := range evs {
			require.Equal(t, oldest+int64(j), e.Seq)
			require.Equal(t, textEvent(oldest+int64(j), len(e.Text)).Text, e.Text)
		}
		require.LessOrEqual(t, r.n, 7)
		require.True(t, r.bytes <= limit || r.n == 1)
	}
}

// Byte eviction moves the head while the buffer is still short of maxEvents; later small
// events must then grow the buffer, not overwrite the oldest entry.
func TestRingGrowsAfterByteEviction(t *testing.T) {
	const limit = 3*o + 30
	r := newRing(100, limit)
	var seq int64
	push := func(size int) {
		seq++
		r.push(textEvent(seq, size))
	}
	push(10)
	push(10)
	push(10)
	push(10) // evicts seq 1: head moves
	for range 20 {
		push(0)
	}
	oldest := seq - int64(r.n) + 1
	evs, size, ok := r.since(oldest-1, seq)
	require.True(t, ok)
	require.Equal(t, r.bytes, size)
	require.LessOrEqual(t, size, limit)
	for j, e := range evs {
		require.Equal(t, oldest+int64(j), e.Seq, "entry %d", j)
	}
	require.Equal(t, int64(seq)-int64(r.n), r.evicted)
}

// Filling the ring costs a logarithmic number of allocations, not one per event: it
// doubles its buffer, it does not regrow on every push.
func TestRingGrowthAllocations(t *testing.T) {
	evs := make([]*Event, 4097)
	for i := range evs {
		evs[i] = textEvent(int64(i+1), 16)
	}
	allocs := testing.AllocsPerRun(5, func() {
		r := newRing(4096, 1<<30)
		for _, e := range evs[:4096] {
			r.push(e)
		}
	})
	// 16, 32, ..., 4096: nine buffers.
	require.LessOrEqual(t, allocs, 10.0)

	r := newRing(4096, 1<<30)
	for _, e := range evs[:4096] {
		r.push(e)
	}
	next := evs[4096]
	steady := testing.AllocsPerRun(100, func() {
		next.Seq = r.oldest + int64(r.n)
		r.push(next)
	})
	require.Zero(t, steady, "a full ring pushes without allocating")
}

// One event log serves two formats. An event the ring keeps whole is encoded once per
// format however many subscribers and replays ask; a delta, kept compact, is built again
// and encoded anew for each replay, identical to what live delivery sent.
func TestRingServesTwoFormatsFromOneLog(t *testing.T) {
	calls := map[string]int{}
	format := func(name string) *Format {
		return NewFormat(name, func(e *Event) []byte {
			calls[name]++
			return fmt.Appendf(nil, "%s:%d:%s:%s:%s:%s:%s", name, e.Seq, e.Type, e.RunID, e.RequestID, e.MessageID, e.Text)
		})
	}
	ws, sse := format("ws"), format("sse")
	run, msg := uuid.New(), uuid.New()

	r := newRing(100, 1<<20)
	counted := 0
	live := map[int64][2]string{}
	l := &liveMessage{msg: chat.Message{ID: msg}}
	for seq := int64(1); seq <= 10; seq++ {
		e := liveDelta(l, seq, EventDelta, run, fmt.Sprintf("%d...", seq))
		if seq%5 == 0 { // seqs 5 and 10: kept whole
			e.Type, e.Message, e.src = EventMessageAdded, &chat.Message{ID: msg, Content: e.Text}, nil
		}
		e.enc = new(encodings) // as publish does
		// Live: three subscribers of each format.
		for range 3 {
			live[seq] = [2]string{string(e.Encode(ws)), string(e.Encode(sse))}
		}
		r.push(e)
		counted += e.size()
		if seq%5 == 0 {
			counted += len(e.Encode(ws)) + len(e.Encode(sse))
		}
	}
	require.Equal(t, map[string]int{"ws": 10, "sse": 10}, calls)

	// A replay in both formats sends what live delivery sent; it encodes the deltas
	// (seqs 6 to 9) again, not the event kept whole.
	evs, _, ok := r.since(4, 10)
	require.True(t, ok)
	require.Len(t, evs, 6)
	for i, e := range evs {
		seq := int64(5 + i)
		require.Equal(t, seq, e.Seq)
		require.Equal(t, live[seq][0], string(e.Encode(ws)))
		require.Equal(t, live[seq][1], string(e.Encode(sse)))
	}
	require.Equal(t, map[string]int{"ws": 14, "sse": 14}, calls)

	// The byte bound counts each event's payload, and the encodings of those kept
	// whole once each: the memory the ring holds, however many subscribers shared it.
	require.Equal(t, counted, r.bytes)
}

// liveDelta appends text to l's text, as a run does, and returns its delta.
func liveDelta(l *liveMessage, seq int64, typ EventType, run uuid.UUID, text string) *Event {
	return &Event{Seq: seq, Type: typ, RunID: run, RequestID: "req", MessageID: l.msg.ID, Text: l.add(text), src: &l.buf}
}

// Consecutive deltas of one message are one entry of their shared ids and where each
// ends in the message's text; the ring keeps no event and no encoding of theirs, so a
// delivered delta's event can be collected.
func TestRingKeepsDeltasCompact(t *testing.T) {
	run := uuid.New()
	a := &liveMessage{msg: chat.Message{ID: uuid.New()}}
	b := &liveMessage{msg: chat.Message{ID: uuid.New()}}
	r := newRing(100, 1<<20)
	seq := int64(0)
	push := func(typ EventType, l *liveMessage, text string) {
		seq++
		e := liveDelta(l, seq, typ, run, text)
		e.enc = new(encodings)
		e.Encode(NewFormat("ws", func(e *Event) []byte { return []byte(e.Text) }))
		r.push(e)
	}
	push(EventDelta, a, "one")
	push(EventDelta, a, " two")
	push(EventToolOutput, b, "out")
	push(EventDelta, a, " three")
	require.Equal(t, 4, r.n)
	require.Equal(t, 3, r.entries, "a's first two deltas are one entry")
	for i := range r.entries {
		require.Nil(t, r.buf[i].ev, "entry %d is kept compact", i)
	}
	require.Equal(t, []uint32{0, 3, 7}, r.buf[0].run.offs)
	require.Equal(t, []uint32{7, 13}, r.buf[2].run.offs, "a's third delta follows another message's")
	require.Equal(t, 3*o+len("one two three")+4*len("req")+o+len("out"), r.bytes, "payload only: the encodings are not kept")

	want := []Event{
		{Seq: 1, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a.msg.ID, Text: "one"},
		{Seq: 2, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a.msg.ID, Text: " two"},
		{Seq: 3, Type: EventToolOutput, RunID: run, RequestID: "req", MessageID: b.msg.ID, Text: "out"},
		{Seq: 4, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a.msg.ID, Text: " three"},
	}
	for from := int64(0); from <= seq; from++ {
		evs, size, ok := r.since(from, seq)
		require.True(t, ok)
		require.Len(t, evs, int(seq-from))
		total := 0
		for i, e := range evs {
			require.NotNil(t, e.enc, "a rebuilt event caches its encodings")
			got := *e
			got.enc = nil
			require.Equal(t, want[int(from)+i], got, "since %d, event %d", from, i)
			total += e.size()
		}
		require.Equal(t, total, size)
	}

	// Text the message took without a delta (what a restart recovered) is in no delta.
	a.add(" unseen")
	push(EventDelta, a, " four")
	evs, _, ok := r.since(seq-2, seq)
	require.True(t, ok)
	require.Equal(t, []string{" three", " four"}, texts(evs))

	// A delta with anything more is kept whole, and so is one whose text is not the
	// newest of its message's.
	seq++
	odd := liveDelta(a, seq, EventDelta, run, "x")
	odd.Status = chat.MessageComplete
	r.push(odd)
	seq++
	copied := liveDelta(a, seq, EventDelta, run, "y")
	copied.Text = string([]byte(copied.Text))
	a.add("z")
	r.push(copied)
	evs, _, ok = r.since(seq-2, seq)
	require.True(t, ok)
	require.Same(t, odd, evs[0])
	require.Same(t, copied, evs[1])
}

// A long run of one message's deltas is evicted from its front, delta by delta, and
// keeps no more offsets than it holds deltas (about), however long the message grows.
func TestRingEvictsWithinARun(t *testing.T) {
	run := uuid.New()
	l := &liveMessage{msg: chat.Message{ID: uuid.New()}}
	r := newRing(10, 1<<20)
	var seq int64
	for seq < 5000 {
		seq++
		r.push(liveDelta(l, seq, EventDelta, run, fmt.Sprintf("<%d>", seq)))
		require.LessOrEqual(t, len(r.buf[r.head].run.offs), 2*64+2)
	}
	require.Equal(t, 1, r.entries)
	require.Equal(t, 10, r.n)
	require.EqualValues(t, 4990, r.evicted)
	_, _, ok := r.since(4989, seq)
	require.False(t, ok)
	evs, size, ok := r.since(4990, seq)
	require.True(t, ok)
	require.Len(t, evs, 10)
	for i, e := range evs {
		require.Equal(t, int64(4991+i), e.Seq)
		require.Equal(t, fmt.Sprintf("<%d>", e.Seq), e.Text)
	}
	require.Equal(t, r.bytes, size)
}

// Whole events, runs of deltas of several messages and both bounds, mixed: every replay
// from every point is exactly what was pushed, across many evictions.
func TestRingMixedEntriesInOrder(t *testing.T) {
	const limit = 6*o + 80
	r := newRing(9, limit)
	run := uuid.New()
	msgs := []*liveMessage{{msg: chat.Message{ID: uuid.New()}}, {msg: chat.Message{ID: uuid.New()}}}
	var pushed []Event
	var seq int64
	for i := range 600 {
		seq++
		var e *Event
		switch {
		case i%7 == 3:
			e = textEvent(seq, 2+i%5) // no message text: kept whole
		case i%11 == 5:
			e = liveDelta(msgs[0], seq, EventDelta, run, strings.Repeat("w", 1+i%30))
			e.Status = chat.MessageComplete // kept whole
		default:
			typ := EventDelta
			if i%13 < 4 {
				typ = EventToolOutput
			}
			e = liveDelta(msgs[(i/5)%2], seq, typ, run, fmt.Sprintf("%d;", i))
		}
		pushed = append(pushed, *e)
		r.push(e)
		require.LessOrEqual(t, r.n, 9)
		require.True(t, r.bytes <= limit || r.n == 1)
		oldest := seq - int64(r.n) + 1
		require.Equal(t, oldest, r.oldest)
		for from := oldest - 1; from <= seq; from++ {
			evs, size, ok := r.since(from, seq)
			require.True(t, ok)
			require.Len(t, evs, int(seq-from))
			total := 0
			for j, got := range evs {
				w := pushed[from+int64(j)]
				require.Equal(t, w.Seq, got.Seq)
				require.Equal(t, w.Type, got.Type)
				require.Equal(t, w.MessageID, got.MessageID)
				require.Equal(t, w.Text, got.Text)
				require.Equal(t, w.Status, got.Status)
				total += got.size()
			}
			require.Equal(t, total, size)
		}
		if oldest > 1 {
			_, _, ok := r.since(oldest-2, seq)
			require.False(t, ok, "seq %d was evicted", oldest-1)
		}
	}
	require.Equal(t, seq-int64(r.n), r.evicted)
}

// A full ring of deltas pushes without allocating, and filling it allocates a few
// times, not once per delta.
func TestRingDeltaAllocations(t *testing.T) {
	run := uuid.New()
	l := &liveMessage{msg: chat.Message{ID: uuid.New()}}
	l.buf.Grow(1 << 20)
	r := newRing(4096, 1<<30)
	var seq int64
	next := &Event{Type: EventDelta, RunID: run, RequestID: "req", MessageID: l.msg.ID, src: &l.buf}
	push := func() {
		seq++
		next.Seq, next.Text = seq, l.add("tok ")
		r.push(next)
	}
	fill := testing.AllocsPerRun(1, func() {
		for range 4096 {
			push()
		}
	})
	require.LessOrEqual(t, fill, 12.0, "the entry, its offsets doubling, the buffer")
	steady := testing.AllocsPerRun(1000, push)
	require.Zero(t, steady, "a full ring of deltas pushes without allocating")
	evs, _, ok := r.since(seq-4096, seq)
	require.True(t, ok)
	require.Len(t, evs, 4096)
	require.Equal(t, "tok ", evs[4095].Text)
}
