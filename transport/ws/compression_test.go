package ws_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// extensions dials the server offering permessage-deflate (or not) and returns the
// extensions it agreed to.
func extensions(t *testing.T, url string, offer bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{Subprotocols: []string{ws.Subprotocol}}
	if offer {
		opts.CompressionMode = websocket.CompressionNoContextTakeover
	} else {
		opts.HTTPHeader = http.Header{} // coder/websocket offers nothing by default
	}
	c, resp, err := websocket.Dial(ctx, url, opts)
	require.NoError(t, err)
	defer c.CloseNow()
	return resp.Header.Get("Sec-WebSocket-Extensions")
}

// CHATD_COMPRESSION negotiates permessage-deflate with a client that offers it, and
// only then; a compressed conversation streams and catches up exactly as a plain one.
func TestCompressionNegotiatedWithClientsThatOfferIt(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a long answer that compresses well ", 100) // 3.5 KB, one delta
	for _, on := range []bool{false, true} {
		e := newEnv(t, envOptions{
			agent:    script.New(script.Text("short", " reply"), script.Text(long)),
			wsConfig: func(c *ws.Config) { c.Compression = on },
		})
		require.Empty(t, extensions(t, e.URL, false), "a client that offers nothing gets nothing")
		got := extensions(t, e.URL, true)
		if !on {
			require.Empty(t, got, "off: not negotiated")
			continue
		}
		require.Contains(t, got, "permessage-deflate")
		require.Contains(t, got, "server_no_context_takeover", "no compressor is kept between messages")

		c := wstest.Dial(t, e.URL, &wstest.DialOptions{Subprotocols: []string{ws.Subprotocol}, CompressionMode: websocket.CompressionNoContextTakeover})
		id := c.Hello("").SessionID
		c.Chat("r1", "go")
		end := c.ReadTerminal()
		require.Equal(t, "chat.done", end.Type)
		msgs := c.State.Sorted()
		require.Equal(t, "short reply"+long, msgs[len(msgs)-1].Content)
		// A second tab's snapshot (well over the threshold) arrives whole, compressed.
		d := wstest.Dial(t, e.URL, &wstest.DialOptions{Subprotocols: []string{ws.Subprotocol}, CompressionMode: websocket.CompressionNoContextTakeover})
		d.Hello(id)
		require.Empty(t, wstest.Diff(c.State.Sorted(), d.State.Sorted()))
	}
}
