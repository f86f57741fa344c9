package ws

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// countingConn records each Write the batchConn makes on the socket.
type countingConn struct {
	net.Conn
	mu     sync.Mutex
	writes [][]byte
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, bytes.Clone(p))
	return len(p), nil
}

// A batch's writes reach the socket as one write, in order; a write outside a batch goes
// at once; a batch over batchFlushBytes is sent in parts rather than held whole.
func TestBatchConnGathersABatchIntoOneWrite(t *testing.T) {
	sock := &countingConn{}
	b := &batchConn{Conn: sock}
	_, err := b.Write([]byte("alone"))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("alone")}, sock.writes, "no batch: written at once")

	b.begin()
	for _, f := range []string{"one", "two", "three"} {
		_, err := b.Write([]byte(f))
		require.NoError(t, err)
	}
	require.Len(t, sock.writes, 1, "nothing leaves before the batch ends")
	require.NoError(t, b.end())
	require.Equal(t, []byte("onetwothree"), sock.writes[1], "the batch in one write, in order")

	b.begin()
	part := bytes.Repeat([]byte("x"), batchDirectBytes-1)
	for range batchFlushBytes / len(part) {
		_, err = b.Write(part)
		require.NoError(t, err)
	}
	require.Len(t, sock.writes, 2, "below the bound, the batch is held")
	_, err = b.Write(part)
	require.NoError(t, err)
	require.Len(t, sock.writes, 3, "a batch that grew past the bound is sent")
	require.Len(t, sock.writes[2], (batchFlushBytes/len(part)+1)*len(part))
	require.NoError(t, b.end())
	require.Len(t, sock.writes, 3, "and nothing is left for the end")
}

// A write as large as batchDirectBytes is not copied into the batch: what the batch holds
// leaves first, then it, in order; the batch's buffer goes back to the pool each time the
// batch is sent, so an idle connection holds none.
func TestBatchConnSendsALargeWriteBehindTheBatch(t *testing.T) {
	sock := &countingConn{}
	b := &batchConn{Conn: sock}
	b.begin()
	_, err := b.Write([]byte("head"))
	require.NoError(t, err)
	require.NotNil(t, b.buf)
	big := bytes.Repeat([]byte("y"), batchDirectBytes)
	_, err = b.Write(big)
	require.NoError(t, err)
	require.Nil(t, b.buf, "the buffer is given back once sent")
	_, err = b.Write([]byte("tail"))
	require.NoError(t, err)
	require.NoError(t, b.end())
	require.Nil(t, b.buf, "an ended batch holds no buffer")
	// countingConn has no writev: net.Buffers writes the two parts in turn.
	require.Equal(t, [][]byte{[]byte("head"), big, []byte("tail")}, sock.writes)
}

// Reads return what net/http read past the upgrade request first, then the socket's.
func TestBatchConnReadsEarlyBytesFirst(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	b := &batchConn{Conn: server, early: []byte("abc")}
	defer b.Close()
	go func() { _, _ = client.Write([]byte("def")) }()
	var got []byte
	p := make([]byte, 2)
	for len(got) < 6 {
		n, err := b.Read(p)
		require.NoError(t, err)
		got = append(got, p[:n]...)
	}
	require.Equal(t, "abcdef", string(got))
	require.Nil(t, b.early)
}

// tcpPair is a real loopback connection: server side with a small send buffer, client
// side with a small receive buffer, so a client that does not read fills them quickly.
func tcpPair(t *testing.T) (server, client *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	server, err = ln.AcceptTCP()
	require.NoError(t, err)
	require.NoError(t, server.SetWriteBuffer(16<<10))
	require.NoError(t, client.SetReadBuffer(16<<10))
	t.Cleanup(func() { _ = server.Close(); _ = client.Close() })
	return server, client
}

// Without a writer owning the connection, writes never wait: what a client that does not
// read leaves over is held, the writer is kicked, and later writes (a direct batch, a
// control frame) go behind it. A writer that owns the connection sends it all, in order,
// once the client reads; then a write goes straight out again, kicking nobody.
func TestBatchConnWritesWithoutWaiting(t *testing.T) {
	server, client := tcpPair(t)
	b := newBatchConn(server)
	require.NotNil(t, b.raw)
	var kicks int
	b.writeBehind(func() { kicks++ })

	big := bytes.Repeat([]byte("a"), 256<<10) // far more than the buffers hold
	n, err := b.Write(big)                    // returns at once: the test would hang otherwise
	require.NoError(t, err)
	require.Equal(t, len(big), n)
	require.Equal(t, 1, kicks)
	require.NotEmpty(t, b.held)
	require.Less(t, len(b.held), len(big), "the socket took some at once")

	_, err = b.Write([]byte("ping")) // a control frame, written outside a batch
	require.NoError(t, err)
	require.Equal(t, 2, kicks)
	b.begin()
	_, err = b.Write([]byte("frame"))
	require.NoError(t, err)
	held, err := b.endNow()
	require.NoError(t, err)
	require.True(t, held, "a direct batch goes behind what is held")

	_, err = b.Write(bytes.Repeat([]byte("z"), heldMax))
	require.ErrorIs(t, err, errHeldFull, "a socket that takes nothing does not get memory without end")

	want := append(append(bytes.Clone(big), "ping"...), "frame"...)
	got := make(chan []byte)
	go func() {
		buf := make([]byte, len(want))
		_, err := io.ReadFull(client, buf)
		if err != nil {
			buf = nil
		}
		got <- buf
	}()
	b.own(true)
	b.begin()
	require.NoError(t, b.end(), "the writer sends what is held, waiting for the client")
	b.own(false)
	require.Equal(t, want, <-got)
	require.Nil(t, b.held)

	_, err = b.Write([]byte("alone"))
	require.NoError(t, err)
	require.Equal(t, 2, kicks, "no kick for a write the socket took")
	p := make([]byte, 5)
	_, err = io.ReadFull(client, p)
	require.NoError(t, err)
	require.Equal(t, "alone", string(p))
}

// A close frame coder/websocket writes (an echo of the client's, say) ends the frames
// writeText writes itself: no data frame may follow a close. A data frame's piece that
// only starts like one is not taken for one unless it is one whole.
func TestBatchConnNoTextAfterAClose(t *testing.T) {
	server, _ := tcpPair(t)
	b := newBatchConn(server)
	b.writeBehind(func() {})
	ok, held, err := b.writeText([][]byte{[]byte("before")})
	require.True(t, ok)
	require.False(t, held)
	require.NoError(t, err)

	_, err = b.Write([]byte{0x88, 0x05, 'x', 'y'}) // too short for its length: not a close
	require.NoError(t, err)
	ok, _, _ = b.writeText([][]byte{[]byte("still")})
	require.True(t, ok)

	_, err = b.Write([]byte{0x88, 0x02, 0x03, 0xe8}) // close 1000
	require.NoError(t, err)
	ok, _, err = b.writeText([][]byte{[]byte("after")})
	require.False(t, ok, "left to coder/websocket, which refuses it")
	require.NoError(t, err)
}

// The header of a final, unmasked text frame, at each length's edges (RFC 6455, 5.2).
func TestAppendTextHeader(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x81, 0}},
		{125, []byte{0x81, 125}},
		{126, []byte{0x81, 126, 0, 126}},
		{0xffff, []byte{0x81, 126, 0xff, 0xff}},
		{0x10000, []byte{0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
	} {
		require.Equal(t, tc.want, appendTextHeader(nil, tc.n), "%d", tc.n)
	}
}

// heldMax bounds what piles up behind a leftover, not the leftover: a frame larger than
// heldMax that the socket did not take does not fail the next ping.
func TestBatchConnHoldsALargeFrameAndAPingBehindIt(t *testing.T) {
	server, _ := tcpPair(t)
	b := newBatchConn(server)
	b.writeBehind(func() {})
	ok, held, err := b.writeText([][]byte{bytes.Repeat([]byte("f"), heldMax+1)})
	require.True(t, ok)
	require.True(t, held)
	require.NoError(t, err)
	require.Greater(t, len(b.held), heldMax-(1<<20), "most of it is held")
	_, err = b.Write([]byte{0x89, 0x00}) // a ping
	require.NoError(t, err)
	_, err = b.Write(bytes.Repeat([]byte("z"), heldMax))
	require.ErrorIs(t, err, errHeldFull, "what piles up behind it is bounded")
}
