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

// writeNow makes one write(2) on the non-blocking socket and returns what it took: 0
// when its buffer is full, never waiting for room.
func (b *batchConn) writeNow(p []byte) (int, error) {
	var n int
	var werr error
	err := b.raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), p)
			if werr != syscall.EINTR {
				return true // done either way: the runtime is not asked to wait
			}
		}
	})
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
