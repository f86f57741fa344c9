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
	big := bytes.Repeat([]byte("x"), batchFlushBytes)
	_, err = b.Write(big)
	require.NoError(t, err)
	require.Len(t, sock.writes, 3, "a batch that grew past the bound is sent")
	require.NoError(t, b.end())
	require.Len(t, sock.writes, 3, "and nothing is left for the end")
}
