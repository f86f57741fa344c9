package ws

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
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
// while a batch is open. Writes from other goroutines (coder/websocket's pings, pongs and
// close frames) during a batch join it.
//
// Writes wait for the socket only while a writer goroutine owns the connection (own).
// Otherwise (a frame written from the session's actor, see conn.WriteNow, or a control
// frame from the ping timer or the reader) a write never waits: the socket takes what it
// can at once and the rest is held, and kick is called for a writer to send it. So
// neither coder/websocket's write lock nor this one is ever held across a wait on the
// socket while no writer runs, and a goroutine that writes without one is never stuck
// behind a client that does not read.
type batchConn struct {
	net.Conn
	// raw writes to the socket without waiting; nil where the connection is not one
	// (then every write may wait, as a net.Conn's does, and conn.WriteNow is not used).
	raw syscall.RawConn
	// kick asks for a writer to send what is held. Called without mu. Until it is set
	// (writeBehind), every write waits.
	kick func()

	// early is what net/http read past the upgrade request, not yet read. Read only by
	// the connection's reader (coder/websocket reads one frame at a time).
	early []byte

	mu       sync.Mutex
	batching bool
	buf      *[]byte // from batchBuffers while a batch holds something
	// owned: a writer goroutine runs, and writes wait for the socket.
	owned bool
	// held is what a write that did not wait left over: it is sent before anything
	// else, by the writer that kick wakes.
	held []byte
	// heldBehind is what was added to held after its first leftover (heldMax).
	heldBehind int
	// closeSent: coder/websocket wrote what looks like a close frame; no data frame may
	// follow it, so writeText leaves data frames to coder/websocket from then on.
	closeSent bool
	// rw is writeNow's write(2).
	rw rawWrite
}

// heldMax bounds what writes that do not wait may add behind what is held already for
// the writer (control frames written before the writer owns the connection, a direct
// batch that came meanwhile). A connection past it has failed.
const heldMax = 4 << 20

var errHeldFull = errors.New("ws: the socket takes nothing and too much is held for it")

func newBatchConn(nc net.Conn) *batchConn {
	return &batchConn{Conn: nc, raw: rawConn(nc)}
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
	kick, err := b.writeLocked(p)
	b.mu.Unlock()
	if kick {
		b.kick()
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (b *batchConn) writeLocked(p []byte) (kick bool, err error) {
	if isCloseFrame(p) {
		b.closeSent = true
	}
	if !b.batching {
		if b.waits() && len(b.held) == 0 {
			_, err = b.Conn.Write(p)
			return false, err
		}
		return b.flushLocked(p)
	}
	if len(p) >= batchDirectBytes && b.waits() {
		// A large payload is not copied: it leaves now, behind what the batch holds.
		return b.flushLocked(p)
	}
	if b.buf == nil {
		b.buf = batchBuffers.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	if len(*b.buf) >= batchFlushBytes {
		return b.flushLocked(nil)
	}
	return false, nil
}

// waits reports whether writes wait for the socket. b.mu must be held.
func (b *batchConn) waits() bool { return b.owned || b.raw == nil || b.kick == nil }

// writeBehind sets kick (the connection's outbox's Kick): from then on, writes made
// while no writer owns the connection do not wait.
func (b *batchConn) writeBehind(kick func()) {
	b.mu.Lock()
	b.kick = kick
	b.mu.Unlock()
}

// own is called by the writer goroutine: true as it starts, false before it looks for
// more work. Giving the connection up waits for a write in progress, so once it returns
// no write waits for the socket.
func (b *batchConn) own(owned bool) {
	b.mu.Lock()
	b.owned = owned
	b.mu.Unlock()
}

// begin opens a batch: writes are gathered until end or endNow.
func (b *batchConn) begin() {
	b.mu.Lock()
	b.batching = true
	b.mu.Unlock()
}

// end sends what is held and what the batch gathered, and closes it: in one write(2),
// waiting for the socket when a writer owns the connection.
func (b *batchConn) end() error {
	b.mu.Lock()
	b.batching = false
	kick, err := b.flushLocked(nil)
	b.mu.Unlock()
	if kick {
		b.kick()
	}
	return err
}

// endNow closes a batch opened without a writer (conn.WriteNow): the socket takes what
// it can at once, and held reports that the rest is held for a writer to send.
func (b *batchConn) endNow() (held bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batching = false
	return b.flushLocked(nil)
}

// flushLocked sends what is held, what the batch gathered, then more (nil for nothing
// more), in that order. When writes wait it sends all of it, in one write(2) (writev(2)
// for several parts); otherwise the socket takes what it can now and the rest is held:
// kick reports that a writer must be woken to send it. The batch's buffer goes back.
func (b *batchConn) flushLocked(more []byte) (kick bool, err error) {
	defer b.releaseBuf()
	var gathered []byte
	if b.buf != nil {
		gathered = *b.buf
	}
	if b.waits() {
		var parts [3][]byte
		n := 0
		for _, p := range [...][]byte{b.held, gathered, more} {
			if len(p) > 0 {
				parts[n] = p
				n++
			}
		}
		switch n {
		case 0:
		case 1:
			_, err = b.Conn.Write(parts[0])
		default:
			bufs := append(net.Buffers(nil), parts[:n]...) // the only allocation, and rare
			_, err = bufs.WriteTo(b.Conn)
		}
		b.held, b.heldBehind = nil, 0
		return false, err
	}
	if len(b.held) > 0 {
		// Behind what is held already: a writer was kicked for it. What piles up behind
		// it (control frames, until the writer owns the connection) is bounded; the
		// first leftover is one batch of the outbox's, whatever its size.
		if b.heldBehind+len(gathered)+len(more) > heldMax {
			return false, errHeldFull
		}
		b.heldBehind += len(gathered) + len(more)
		b.held = append(append(b.held, gathered...), more...)
		return true, nil
	}
	p := more
	switch {
	case len(gathered) > 0 && len(more) > 0:
		p = append(gathered, more...)
		*b.buf = p
	case len(gathered) > 0:
		p = gathered
	}
	if len(p) == 0 {
		return false, nil
	}
	n, err := b.writeNow(p)
	if err != nil {
		return false, err
	}
	if n == len(p) {
		return false, nil
	}
	b.held = append([]byte(nil), p[n:]...)
	b.heldBehind = 0
	return true, nil
}

// isCloseFrame reports whether p is a whole server close frame. coder/websocket writes
// every control frame in one Write (it fits its 128-byte buffer, hijackWriteBuffer); a
// piece of a data frame that happens to look like one only makes writeText leave data
// frames to coder/websocket, which knows.
func isCloseFrame(p []byte) bool {
	return len(p) >= 2 && p[0] == 0x88 && p[1]&0x80 == 0 && int(p[1]) <= 125 && len(p) == 2+int(p[1])
}

// writeText writes unfragmented, uncompressed text frames holding payloads without
// waiting, in one write(2), for a connection with no extension and no writer
// (conn.WriteNow): a frame's header is two to ten bytes, and writing it here rather than
// through coder/websocket's Write saves that Write's locks and state (a tenth of chatd's
// CPU when fanning out). Nothing else writes a data frame meanwhile: coder/websocket
// writes only control frames while no writer runs, each in one Write, so frames never
// interleave. ok false: nothing was written (a close was sent, or a writer owns the
// connection); held: the socket did not take all of it, and a writer must send the rest.
func (b *batchConn) writeText(payloads [][]byte) (ok, held bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closeSent || b.waits() || b.batching {
		return false, false, nil
	}
	if b.buf == nil {
		b.buf = batchBuffers.Get().(*[]byte)
	}
	for _, p := range payloads {
		*b.buf = appendTextHeader(*b.buf, len(p))
		*b.buf = append(*b.buf, p...)
	}
	held, err = b.flushLocked(nil)
	return true, held, err
}

// appendTextHeader appends the header of a final, unmasked text frame of n bytes
// (RFC 6455, section 5.2).
func appendTextHeader(b []byte, n int) []byte {
	switch {
	case n <= 125:
		return append(b, 0x81, byte(n))
	case n <= 0xffff:
		return append(b, 0x81, 126, byte(n>>8), byte(n))
	default:
		return append(b, 0x81, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// releaseBuf gives the batch's buffer back. b.mu must be held.
func (b *batchConn) releaseBuf() {
	if b.buf == nil {
		return
	}
	if cap(*b.buf) <= batchKeepBytes {
		*b.buf = (*b.buf)[:0]
		batchBuffers.Put(b.buf)
	}
	b.buf = nil
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
	w.conn = newBatchConn(nc)
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
