package conversation

import (
	"fmt"
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
	for seq := int64(1); seq <= 10; seq++ {
		e := textEvent(seq, 4)
		e.RunID, e.RequestID, e.MessageID = run, "req", msg
		if seq%5 == 0 { // seqs 5 and 10: kept whole
			e.Type, e.Message = EventMessageAdded, &chat.Message{ID: msg, Content: e.Text}
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

// Consecutive deltas of one message share one copy of their ids; the ring keeps no
// event and no encoding of theirs, so a delivered delta's event can be collected.
func TestRingKeepsDeltasCompact(t *testing.T) {
	run, a, b := uuid.New(), uuid.New(), uuid.New()
	r := newRing(100, 1<<20)
	seq := int64(0)
	push := func(typ EventType, msg uuid.UUID, text string) {
		seq++
		e := &Event{Seq: seq, Type: typ, RunID: run, RequestID: "req", MessageID: msg, Text: text}
		e.enc = new(encodings)
		e.Encode(NewFormat("ws", func(e *Event) []byte { return []byte(e.Text) }))
		r.push(e)
	}
	push(EventDelta, a, "one")
	push(EventDelta, a, " two")
	push(EventToolOutput, b, "out")
	push(EventDelta, a, " three")
	for i := range r.n {
		require.Nil(t, r.buf[i].ev, "entry %d is kept compact", i)
	}
	require.Same(t, r.buf[0].ids, r.buf[1].ids, "deltas of one message share their ids")
	require.NotSame(t, r.buf[1].ids, r.buf[2].ids)
	require.NotSame(t, r.buf[2].ids, r.buf[3].ids)
	require.Equal(t, 3*o+len("one two three")+4*len("req")+o+len("out"), r.bytes, "payload only: the encodings are not kept")

	evs, _, ok := r.since(0, seq)
	require.True(t, ok)
	want := []Event{
		{Seq: 1, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a, Text: "one"},
		{Seq: 2, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a, Text: " two"},
		{Seq: 3, Type: EventToolOutput, RunID: run, RequestID: "req", MessageID: b, Text: "out"},
		{Seq: 4, Type: EventDelta, RunID: run, RequestID: "req", MessageID: a, Text: " three"},
	}
	for i, e := range evs {
		require.NotNil(t, e.enc, "a rebuilt event caches its encodings")
		got := *e
		got.enc = nil
		require.Equal(t, want[i], got)
	}

	// A delta with anything more is kept whole.
	seq++
	odd := &Event{Seq: seq, Type: EventDelta, MessageID: a, Text: "x", Status: chat.MessageComplete}
	r.push(odd)
	evs, _, ok = r.since(seq-1, seq)
	require.True(t, ok)
	require.Same(t, odd, evs[0])
}
