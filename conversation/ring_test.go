package conversation

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func frame(seq int64, size int) []byte {
	b := []byte(fmt.Sprintf("%d:", seq))
	for len(b) < size {
		b = append(b, '.')
	}
	return b
}

func TestRingBoundedByCount(t *testing.T) {
	r := newRing(3, 1<<20)
	for seq := int64(1); seq <= 5; seq++ {
		r.push(seq, frame(seq, 4))
	}
	_, _, ok := r.since(1, 5)
	require.False(t, ok, "seq 2 was evicted")
	frames, size, ok := r.since(2, 5)
	require.True(t, ok)
	require.Equal(t, [][]byte{frame(3, 4), frame(4, 4), frame(5, 4)}, frames)
	require.Equal(t, 12, size)
	require.EqualValues(t, 2, r.evicted)

	frames, _, ok = r.since(5, 5)
	require.True(t, ok)
	require.Empty(t, frames)

	_, _, ok = r.since(6, 5)
	require.False(t, ok, "a seq beyond the head is not replayable")
}

func TestRingBoundedByBytes(t *testing.T) {
	r := newRing(100, 25)
	for seq := int64(1); seq <= 4; seq++ {
		r.push(seq, frame(seq, 10))
	}
	// 10 bytes each, 25 allowed: only the newest two fit.
	require.Equal(t, 2, r.n)
	require.Equal(t, 20, r.bytes)
	frames, _, ok := r.since(2, 4)
	require.True(t, ok)
	require.Equal(t, [][]byte{frame(3, 10), frame(4, 10)}, frames)

	// A frame larger than the bound on its own replaces everything and is kept.
	r.push(5, frame(5, 40))
	require.Equal(t, 1, r.n)
	frames, _, ok = r.since(4, 5)
	require.True(t, ok)
	require.Equal(t, [][]byte{frame(5, 40)}, frames)
	_, _, ok = r.since(3, 5)
	require.False(t, ok)
}

func TestRingEmpty(t *testing.T) {
	r := newRing(4, 100)
	frames, _, ok := r.since(0, 0)
	require.True(t, ok)
	require.Empty(t, frames)
	_, _, ok = r.since(0, 3)
	require.False(t, ok, "events 1-3 were never held")
}

// The circular buffer must keep order across many wrap-arounds and mixed evictions.
func TestRingWrapsInOrder(t *testing.T) {
	r := newRing(7, 60)
	var seq int64
	for i := 0; i < 500; i++ {
		seq++
		r.push(seq, frame(seq, 3+i%9))
		oldest := seq - int64(r.n) + 1
		frames, _, ok := r.since(oldest-1, seq)
		require.True(t, ok)
		require.Len(t, frames, r.n)
		for j, f := range frames {
			require.Equal(t, frame(oldest+int64(j), len(f)), f)
		}
		require.LessOrEqual(t, r.n, 7)
		require.True(t, r.bytes <= 60 || r.n == 1)
	}
}

// Byte eviction moves the head while the buffer is still short of maxEvents; later small
// frames must then grow the buffer, not overwrite the oldest entry.
func TestRingGrowsAfterByteEviction(t *testing.T) {
	r := newRing(100, 30)
	var seq int64
	push := func(size int) {
		seq++
		r.push(seq, frame(seq, size))
	}
	push(10)
	push(10)
	push(10)
	push(10) // evicts seq 1: head moves
	for range 20 {
		push(3)
	}
	oldest := seq - int64(r.n) + 1
	frames, size, ok := r.since(oldest-1, seq)
	require.True(t, ok)
	require.Equal(t, r.bytes, size)
	require.LessOrEqual(t, size, 30)
	for j, f := range frames {
		require.Equal(t, frame(oldest+int64(j), len(f)), f, "entry %d", j)
	}
	require.Equal(t, int64(seq)-int64(r.n), r.evicted)
}

// Filling the ring costs a logarithmic number of allocations, not one per event: it
// doubles its buffer, it does not regrow on every push.
func TestRingGrowthAllocations(t *testing.T) {
	f := frame(1, 16)
	allocs := testing.AllocsPerRun(5, func() {
		r := newRing(4096, 1<<30)
		for seq := int64(1); seq <= 4096; seq++ {
			r.push(seq, f)
		}
	})
	// 16, 32, ..., 4096: nine buffers.
	require.LessOrEqual(t, allocs, 10.0)

	r := newRing(4096, 1<<30)
	for seq := int64(1); seq <= 4096; seq++ {
		r.push(seq, f)
	}
	steady := testing.AllocsPerRun(100, func() {
		r.push(r.buf[(r.head+r.n-1)%len(r.buf)].seq+1, f)
	})
	require.Zero(t, steady, "a full ring pushes without allocating")
}
