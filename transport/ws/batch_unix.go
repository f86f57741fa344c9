//go:build unix

package ws

import (
	"net"
	"syscall"
)

// rawConn is the socket under nc, for writes that do not wait; nil if nc is not one.
func rawConn(nc net.Conn) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// rawWrite is one write(2) for RawConn.Write: its function is made once per connection
// (a closure made per write would be half of what chatd allocates per token). Used
// under batchConn.mu.
type rawWrite struct {
	p   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func (w *rawWrite) write(fd uintptr) bool {
	for {
		w.n, w.err = syscall.Write(int(fd), w.p)
		if w.err != syscall.EINTR {
			return true // done either way: the runtime is not asked to wait
		}
	}
}

// writeNow makes one write(2) on the non-blocking socket and returns what it took: 0
// when its buffer is full, never waiting for room. b.mu must be held.
func (b *batchConn) writeNow(p []byte) (int, error) {
	w := &b.rw
	if w.fn == nil {
		w.fn = w.write
	}
	w.p = p
	err := b.raw.Write(w.fn)
	n, werr := w.n, w.err
	w.p, w.err = nil, nil
	if err != nil {
		return 0, err
	}
	if werr == syscall.EAGAIN {
		return 0, nil
	}
	if werr != nil {
		return 0, werr
	}
	return n, nil
}
