//go:build !unix

package ws

import (
	"errors"
	"net"
	"syscall"
)

// rawConn: writes that do not wait are built for unix sockets only; elsewhere every
// frame goes through a writer goroutine.
func rawConn(net.Conn) syscall.RawConn { return nil }

type rawWrite struct{}

func (b *batchConn) writeNow([]byte) (int, error) {
	return 0, errors.New("ws: writes that do not wait are not supported here")
}
