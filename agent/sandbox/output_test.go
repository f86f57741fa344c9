package sandbox_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/sandbox"
)

// HeadTail keeps the first and the last bytes, whatever the sizes of the writes, and
// says how many it left out between them.
func TestHeadTail(t *testing.T) {
	var all strings.Builder
	for i := range 5000 {
		all.WriteString(strings.Repeat(string(rune('a'+i%26)), i%37))
	}
	text := all.String()
	for _, chunk := range []int{1, 7, 100, 999, 1000, 1001, 5000, len(text)} {
		var out bytes.Buffer
		h := &sandbox.HeadTail{Head: 1000, Tail: 1000, Out: &out}
		for s := text; s != ""; {
			n := min(chunk, len(s))
			w, err := h.Write([]byte(s[:n]))
			require.NoError(t, err)
			require.Equal(t, n, w)
			s = s[n:]
		}
		require.NoError(t, h.Close())
		omitted := int64(len(text) - 2000)
		require.Equal(t, omitted, h.Omitted(), "chunk %d", chunk)
		require.Equal(t, int64(len(text)), h.Written())
		require.Equal(t, text[:1000]+sandbox.OmittedMarker(omitted)+text[len(text)-1000:], out.String(), "chunk %d", chunk)
	}

	// What fits is kept whole, without a marker.
	for _, n := range []int{0, 10, 1000, 1500, 2000} {
		var out bytes.Buffer
		h := &sandbox.HeadTail{Head: 1000, Tail: 1000, Out: &out}
		_, _ = h.Write([]byte(text[:n]))
		require.NoError(t, h.Close())
		require.Zero(t, h.Omitted())
		require.Equal(t, text[:n], out.String())
	}
	require.Len(t, sandbox.OmittedMarker(1<<62), sandbox.MaxMarker)
	require.Less(t, len(sandbox.OmittedMarker(1)), sandbox.MaxMarker)
}
