package transport_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport"
)

// dialAccepted connects to ln and returns the listener's side of the connection.
func dialAccepted(t *testing.T, ln net.Listener, accepted <-chan net.Conn) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return <-accepted
}

// dialRefused connects to ln and returns the status it is refused with.
func dialRefused(t *testing.T, ln net.Listener) int {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: chatd\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// A connection gives its place back once, however often it is closed (the HTTP server
// and a WebSocket library that hijacked it both close it): a second close must not make
// room for one connection too many.
func TestLimitListenerCountsEachConnectionOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	m := transport.NewMetrics(nil)
	ln := transport.LimitListener(inner, transport.ConnLimits{PerAddr: 2, Total: -1, Metrics: m})
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	first := dialAccepted(t, ln, accepted)
	dialAccepted(t, ln, accepted)
	require.NoError(t, first.Close())
	_ = first.Close()
	_ = first.Close()

	dialAccepted(t, ln, accepted) // the closed one made room for one
	require.Equal(t, http.StatusTooManyRequests, dialRefused(t, ln), "and only for one")

	// A refused client that sends no request is let go without an answer.
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer silent.Close()
	require.NoError(t, silent.SetReadDeadline(time.Now().Add(10*time.Second)))
	got, err := io.ReadAll(silent)
	require.NoError(t, err, "closed by the listener, within its wait")
	require.Empty(t, got)

	// Go's HTTP client, which fails on an answer that comes before its request, reads
	// the refusal.
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + ln.Addr().String() + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
}
