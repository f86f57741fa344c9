package sandbox

import (
	"fmt"
	"io"
	"math"
)

// HeadTail keeps the head and the tail of what is written to it, at most Head and Tail
// bytes, and counts what it leaves out between them: the end of a command's output (its
// exit status, its last errors) matters as much as its beginning. The head goes on to Out
// as it comes; Close writes the marker (OmittedMarker), when something was left out, and
// the tail. It holds no more than 2×Tail bytes, however much is written. Writes fail
// only when Out's do.
type HeadTail struct {
	Head, Tail int
	Out        io.Writer

	n    int64  // bytes written in all
	tail []byte // the last bytes past the head: the tail is its last Tail bytes
}

func (h *HeadTail) Write(p []byte) (int, error) {
	n := len(p)
	if rest := int64(h.Head) - h.n; rest > 0 {
		k := int(min(int64(len(p)), rest))
		if _, err := h.Out.Write(p[:k]); err != nil {
			return 0, err
		}
		h.n += int64(k)
		p = p[k:]
	}
	h.n += int64(len(p))
	switch {
	case h.Tail <= 0 || len(p) == 0:
	case len(p) >= h.Tail:
		h.tail = append(h.tail[:0], p[len(p)-h.Tail:]...)
	default:
		if len(h.tail)+len(p) > 2*h.Tail {
			// Keep what stays of the tail: appending never copies more than 2×Tail.
			h.tail = append(h.tail[:0], h.tail[len(h.tail)-(h.Tail-len(p)):]...)
		}
		h.tail = append(h.tail, p...)
	}
	return n, nil
}

// kept is the tail.
func (h *HeadTail) kept() []byte {
	return h.tail[max(0, len(h.tail)-h.Tail):]
}

// Written is how many bytes were written in all.
func (h *HeadTail) Written() int64 { return h.n }

// Omitted is how many bytes are left out between the head and the tail.
func (h *HeadTail) Omitted() int64 {
	return max(0, h.n-int64(h.Head)-int64(len(h.kept())))
}

// Close writes the marker, when something was left out, and the tail to Out.
func (h *HeadTail) Close() error {
	if n := h.Omitted(); n > 0 {
		if _, err := io.WriteString(h.Out, OmittedMarker(n)); err != nil {
			return err
		}
	}
	_, err := h.Out.Write(h.kept())
	return err
}

// OmittedMarker stands for n bytes of output left out between its head and its tail.
func OmittedMarker(n int64) string {
	return fmt.Sprintf("\n… [%d bytes of output left out] …\n", n)
}

// MaxMarker is the longest OmittedMarker.
var MaxMarker = len(OmittedMarker(math.MaxInt64))
