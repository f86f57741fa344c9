package ws

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// The upgraded connection's buffers. net/http hands a hijacked connection over with its
// own 4 KiB bufio reader and writer, and coder/websocket keeps them for the connection's
// life: 8 KiB of every idle connection. chatd hands coder/websocket small ones instead
// (hijackReadBuffer, hijackWriteBuffer) and does the write buffering itself, in
// batchConn, with a buffer it holds only while it writes.
//
// Frames leave in batches: when the writer finds several frames queued, coder/websocket
// still writes each as its own message and flushes its buffer after each. batchConn sits
// under that buffer, on the hijacked connection: while the writer writes (one frame or a
// batch) it keeps what is flushed, and the end sends it in one write(2). Nothing waits for
// a batch that does not come: the batch ends after the frames that were queued.

const (
	// batchFlushBytes bounds what a batch holds before it is sent anyway.
	batchFlushBytes = 64 << 10
	// batchDirectBytes: a write at least this large (a big frame's payload) is not copied
	// into the batch; it leaves with what the batch holds, in one writev(2).
	batchDirectBytes = 16 << 10
	// batchKeepBytes bounds the buffers kept for later batches (batchBuffers).
	batchKeepBytes = 2 * batchFlushBytes

	// hijackReadBuffer is coder/websocket's read buffer: a client frame's header (at most
	// 14 bytes) and a pong in one read(2). A payload that does not fit is read straight
	// into the message: a command (most are longer than 256 bytes with their token or
	// content) costs two read(2)s whatever this size, and clients send few.
	hijackReadBuffer = 64
	// hijackWriteBuffer is coder/websocket's write buffer, which batchConn sits under: a
	// control frame (at most 2+125 bytes, written outside batches: pings, pongs, closes)
	// fits whole and leaves in one write(2).
	hijackWriteBuffer = 128
)

// batchBuffers are the batches' buffers: a connection takes one while it writes and puts
// it back after, so an idle connection holds none.
var batchBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 8<<10)
	return &b
}}

// batchConn is the hijacked connection. Reads first return what net/http had read past
// the upgrade request (a client may send frames right behind it); writes are gathered
// while a batch is open. Writes from other goroutines (coder/websocket's pings and close
// frames) during a batch join it.
type batchConn struct {
	net.Conn

	// early is what net/http read past the upgrade request, not yet read. Read only by
	// the connection's reader (coder/websocket reads one frame at a time).
	early []byte

	mu       sync.Mutex
	batching bool
	buf      *[]byte // from batchBuffers while a batch holds something
}

func (b *batchConn) Read(p []byte) (int, error) {
	if len(b.early) > 0 {
		n := copy(p, b.early)
		b.early = b.early[n:]
		if len(b.early) == 0 {
			b.early = nil
		}
		return n, nil
	}
	return b.Conn.Read(p)
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.batching {
		return b.Conn.Write(p)
	}
	if len(p) >= batchDirectBytes {
		// A large payload is not copied: it leaves now, behind what the batch holds.
		if err := b.flushLocked(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if b.buf == nil {
		b.buf = batchBuffers.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	if len(*b.buf) >= batchFlushBytes {
		if err := b.flushLocked(nil); err != nil {
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
	return b.flushLocked(nil)
}

// flushLocked sends what the batch holds, then more (nil for nothing more), in one
// write(2) (writev(2) for both), and gives the buffer back.
func (b *batchConn) flushLocked(more []byte) error {
	var err error
	switch {
	case b.buf == nil || len(*b.buf) == 0:
		if len(more) > 0 {
			_, err = b.Conn.Write(more)
		}
	case len(more) == 0:
		_, err = b.Conn.Write(*b.buf)
	default:
		bufs := net.Buffers{*b.buf, more}
		_, err = bufs.WriteTo(b.Conn)
	}
	if b.buf != nil {
		if cap(*b.buf) <= batchKeepBytes {
			*b.buf = (*b.buf)[:0]
			batchBuffers.Put(b.buf)
		}
		b.buf = nil
	}
	return err
}

// batchingWriter is the upgrade's ResponseWriter: its Hijack hands coder/websocket the
// batchConn, with small buffers over it.
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
	// net/http flushed the handshake's answer in Hijack: its writer holds nothing. Its
	// reader may hold what the client sent right behind the request; the batchConn
	// returns that first. Neither is kept.
	w.conn = &batchConn{Conn: nc}
	if n := brw.Reader.Buffered(); n > 0 {
		early, err := brw.Reader.Peek(n)
		if err != nil {
			return nil, nil, err
		}
		w.conn.early = append([]byte(nil), early...)
	}
	return w.conn, bufio.NewReadWriter(
		bufio.NewReaderSize(w.conn, hijackReadBuffer),
		bufio.NewWriterSize(w.conn, hijackWriteBuffer),
	), nil
}
