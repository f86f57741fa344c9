package ws

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// Frames leave in batches: when the writer finds several frames queued, coder/websocket
// still writes each as its own message and flushes its buffer after each, one write(2)
// per frame. batchConn sits under its buffer, on the hijacked connection: while the
// writer writes a batch it keeps what is flushed, and the batch's end sends it in one
// write(2). One frame alone costs the same as before (nothing waits for a batch that
// does not come: the batch ends after the frames that were queued).

// batchFlushBytes bounds what a batch holds before it is sent anyway.
const batchFlushBytes = 64 << 10

// batchConn is the hijacked connection with writes gathered while a batch is open. Writes
// from other goroutines (coder/websocket's pings and close frames) during a batch join it.
type batchConn struct {
	net.Conn
	mu       sync.Mutex
	batching bool
	buf      []byte
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batching {
		return b.Conn.Write(p)
	}
	b.buf = append(b.buf, p...)
	if len(b.buf) >= batchFlushBytes {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// begin opens a batch: writes are gathered until end.
func (b *batchConn) begin() {
	b.mu.Lock()
	b.batching = true
	b.mu.Unlock()
}

// end sends what the batch gathered, in one write(2), and closes it.
func (b *batchConn) end() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = false
	return b.flushLocked()
}

func (b *batchConn) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	if cap(b.buf) > batchFlushBytes*2 {
		b.buf = nil // a large batch's buffer is not kept by an idle connection
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

// batchingWriter is the upgrade's ResponseWriter: its Hijack puts a batchConn under the
// buffered writer coder/websocket writes frames through.
type batchingWriter struct {
	http.ResponseWriter
	conn *batchConn
}

func (w *batchingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, http.ErrNotSupported
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	w.conn = &batchConn{Conn: nc}
	// What net/http buffered for the writer stays empty after the handshake's answer was
	// flushed; the new writer writes through the batchConn.
	if err := brw.Writer.Flush(); err != nil {
		return nil, nil, err
	}
	brw.Writer.Reset(w.conn)
	return w.conn, brw, nil
}
