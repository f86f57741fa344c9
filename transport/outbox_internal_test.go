package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A writer that finds the queue empty lets go of a large buffer (left by a catch-up) and
// keeps a small one for the next frames.
func TestIdleConnectionDropsALargeQueueBuffer(t *testing.T) {
	large := &Outbox{writing: true, frames: make([][]byte, 0, 4096)}
	_, _, ok := large.Take(nil)
	require.False(t, ok)
	require.False(t, large.writing, "the writer exits")
	require.Nil(t, large.frames)

	small := &Outbox{writing: true, frames: make([][]byte, 0, 8)}
	_, _, ok = small.Take(nil)
	require.False(t, ok)
	require.Equal(t, 8, cap(small.frames))
}
