package ws_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

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
