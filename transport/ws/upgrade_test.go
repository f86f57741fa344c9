package ws_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// maskedFrame is a client's text frame.
func maskedFrame(payload string) []byte {
	b := []byte{0x81}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	key := [4]byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, key[:]...)
	for i := range len(payload) {
		b = append(b, payload[i]^key[i%4])
	}
	return b
}

// readServerFrame reads one unmasked server frame.
func readServerFrame(t *testing.T, br *bufio.Reader) (byte, []byte) {
	t.Helper()
	var h [2]byte
	_, err := io.ReadFull(br, h[:])
	require.NoError(t, err)
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var l [2]byte
		_, err = io.ReadFull(br, l[:])
		n = uint64(binary.BigEndian.Uint16(l[:]))
	case 127:
		var l [8]byte
		_, err = io.ReadFull(br, l[:])
		n = binary.BigEndian.Uint64(l[:])
	}
	require.NoError(t, err)
	p := make([]byte, n)
	_, err = io.ReadFull(br, p)
	require.NoError(t, err)
	return h[0], p
}

// A client may send its first frames right behind the upgrade request, in the same
// write: net/http has read them with the request, and they must still be read, in order,
// with what follows on the socket.
func TestFramesBehindTheUpgradeRequestAreRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New()})
	nc, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	require.NoError(t, err)
	defer nc.Close()
	require.NoError(t, nc.SetDeadline(time.Now().Add(wstest.ReadTimeout)))

	req := "GET /v1/ws HTTP/1.1\r\nHost: " + e.ts.Listener.Addr().String() + "\r\n" +
		"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	third := maskedFrame(`{"type":"history.fetch","requestId":"h3","limit":10}`)
	first := append([]byte(req), maskedFrame(`{"type":"hello","requestId":"h1"}`)...)
	first = append(first, maskedFrame(`{"type":"no.such.type","requestId":"h2"}`)...)
	first = append(first, third[:5]...) // and the start of a third
	_, err = nc.Write(first)
	require.NoError(t, err)

	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	got := map[string]string{}
	readUntil := func(n int) {
		for len(got) < n {
			op, p := readServerFrame(t, br)
			require.EqualValues(t, 0x81, op, "a text frame: %q", p)
			var f struct{ Type, RequestID string }
			require.NoError(t, json.Unmarshal(p, &f))
			if f.RequestID != "" {
				got[f.RequestID] = f.Type
			}
		}
	}
	// The rest of the third frame comes later, on its own: once the first two, read with
	// the upgrade request, are answered.
	readUntil(2)
	_, err = nc.Write(third[5:])
	require.NoError(t, err)
	readUntil(3)
	require.Equal(t, map[string]string{"h1": "snapshot", "h2": "error", "h3": "history"}, got)
}

// letters is n pseudo-random letters: a frame whose bytes would show a reordering.
func letters(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(r.IntN(26))
	}
	return string(b)
}

// Frames larger than every buffer go in and out whole: a large chat.send, large deltas
// mixed with small ones (written in batches), and a snapshot holding all of them.
func TestLargeFramesBothWays(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	var deltas []string
	for _, n := range []int{10, 20 << 10, 3, 70 << 10, 100, 200 << 10, 1, 16 << 10, 16<<10 - 1} {
		deltas = append(deltas, letters(r, n))
	}
	e := newEnv(t, envOptions{agent: script.New(script.Text(deltas...))})
	c := e.session()
	content := letters(r, 120<<10)
	require.Equal(t, "ack", c.Chat("r1", content).Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	msgs := c.State.Sorted()
	require.Len(t, msgs, 2)
	require.Equal(t, content, msgs[0].Content)
	require.Equal(t, strings.Join(deltas, ""), msgs[1].Content)
	e.requireConverged(c.State.SessionID, c)

	other := e.join(c.State.SessionID)
	require.Empty(t, wstest.Diff(c.State.Sorted(), other.State.Sorted()))
}

// The HTTP handler returns once the connection is upgraded: net/http's goroutine for the
// connection ends. Shutdown still closes every connection with 1001 and waits for their
// goroutines. Not parallel: no other test's HTTP connections count.
func TestUpgradedConnectionsOutliveTheirHandler(t *testing.T) {
	e := newEnv(t, envOptions{agent: script.New()})
	a, b := e.session(), e.session()
	silent := e.dial()
	var readers, handlers int
	require.Eventually(t, func() bool {
		readers, handlers = goroutinesIn("ws.(*conn).readLoop"), goroutinesIn("net/http.(*conn).serve")
		return readers == 3 && handlers == 0
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3, readers)
	require.Zero(t, handlers, "net/http's connection goroutines")

	// The connections still work.
	requireHistory(t, a, "h1")
	requireHistory(t, b, "h2")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, e.hub.Shutdown(ctx))
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Shutdown(ctx) }()
	for _, c := range []*wstest.Client{a, b, silent} {
		require.EqualValues(t, websocket.StatusGoingAway, c.ExpectClose())
	}
	require.NoError(t, <-stopped)
	require.Zero(t, goroutinesIn("ws.(*conn).readLoop"), "Shutdown returned before the connections' goroutines")
}

// recordingAuth records the request each authentication got.
type recordingAuth struct {
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	header, key, remote, query string
	ctxErr                     error
}

func (a *recordingAuth) Authenticate(_ context.Context, r *http.Request, token string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, seenRequest{
		header: r.Header.Get("X-Test"), key: r.Header.Get("Sec-WebSocket-Key"),
		remote: r.RemoteAddr, query: r.URL.Query().Get("q"), ctxErr: r.Context().Err(),
	})
	return "u", nil
}

// The Authenticator gets the upgrade request's headers, address and URL at the hello and
// at every refresh, after the handler has returned, with a context that is not done.
func TestAuthenticatorSeesTheUpgradeRequest(t *testing.T) {
	t.Parallel()
	auth := &recordingAuth{}
	e := newEnv(t, envOptions{agent: script.New(), wsConfig: func(c *ws.Config) { c.Auth = auth }})
	c := wstest.Dial(t, e.URL+"?q=v", wstest.Header("X-Test", "yes"))
	c.Token = "t"
	c.Hello("")
	c.Send(map[string]any{"type": "auth.refresh", "requestId": "r1", "token": "t2"})
	require.Equal(t, "auth.refreshed", c.ReadReply("r1").Type)

	auth.mu.Lock()
	defer auth.mu.Unlock()
	require.Len(t, auth.seen, 2)
	for _, s := range auth.seen {
		require.Equal(t, "yes", s.header)
		require.Empty(t, s.key, "the handshake's own headers are not kept")
		require.NotEmpty(t, s.remote)
		require.Equal(t, "v", s.query)
		require.NoError(t, s.ctxErr)
	}
}
