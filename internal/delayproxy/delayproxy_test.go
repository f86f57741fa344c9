package delayproxy_test

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/internal/delayproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echo serves one connection that writes back what it reads.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return ln.Addr().String()
}

// Bytes arrive in order and no earlier than the delay; Close ends a connection still open.
func TestDelaysTowardsTheTarget(t *testing.T) {
	const delay = 50 * time.Millisecond
	p, err := delayproxy.Start(echo(t), delay)
	require.NoError(t, err)
	defer p.Close()

	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	for _, msg := range []string{"one", "two"} {
		start := time.Now()
		_, err = c.Write([]byte(msg))
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, msg, string(got))
		require.GreaterOrEqual(t, time.Since(start), delay)
	}
}
