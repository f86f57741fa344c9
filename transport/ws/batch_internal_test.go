package ws

import (
	"bytes"
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
