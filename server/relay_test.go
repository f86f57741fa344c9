package server

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// startNode starts a chatd node and returns it with its admin listener's address.
func startNode(t *testing.T, name string, env map[string]string) (*child, string) {
	t.Helper()
	c := startChild(t, name, env)
	return c, c.admin
}

// apiAt sends an HTTP API request to the node at addr and returns its status and body.
func apiAt(t *testing.T, method, addr, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(dbCtx(t), method, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Two nodes on one database: a client of node B reaches a session node A holds, after
// its hello (relayed) and by ?session= (the upgrade proxied); the HTTP API's rename and
// delete act on A's actor. When A shuts down, B's client is told 4010, reconnects to B,
// and B serves the session itself and finishes its run.
func TestRelayToTheSessionsNode(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := func() map[string]string {
		return map[string]string{
			"DATABASE_URL":      dbURL,
			"CHATD_DEMO_DELAY":  "10ms",
			"CHATD_DEMO_WORDS":  "300",
			"CHATD_LEASE_TTL":   "1s",
			"CHATD_RECOVER":     "continue",
			"CHATD_SANDBOX_DIR": sandboxDir(t),
		}
	}
	a, _ := startNode(t, "chatd A", env())
	b, bAdmin := startNode(t, "chatd B", env())

	// A client of A starts a session and a run; one of B says hello to it.
	onA := wstest.Dial(t, a.wsURL(), nil)
	sessionID := onA.Hello("").SessionID
	ack := onA.Chat("req-1", "tell me something")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	onA.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })

	onB := wstest.Dial(t, b.wsURL(), nil)
	require.Equal(t, "snapshot", onB.Hello(sessionID).Type)
	require.Equal(t, ack.RunID, onB.ReadTerminal().RunID)
	require.Equal(t, "chat.done", onA.ReadTerminal().Type)
	require.Empty(t, wstest.Diff(onA.State.Sorted(), onB.State.Sorted()), "B's client equals A's")
	require.Empty(t, wstest.Diff(toWire(t, sessionMessages(t, st, sessionID)), onB.State.Sorted()), "B's client equals the database")
	m := scrapeAt(t, bAdmin)
	require.Equal(t, 1.0, m.value(t, "chatd_relayed_connections_total", "via", "hello"))
	require.Equal(t, 1.0, m.value(t, "chatd_relayed_connections_open"))

	// ?session= proxies the upgrade itself.
	viaURL := wstest.Dial(t, b.wsURL()+"?session="+sessionID, nil)
	require.Equal(t, "snapshot", viaURL.Hello(sessionID).Type)
	require.Empty(t, wstest.Diff(onA.State.Sorted(), viaURL.State.Sorted()))
	require.Equal(t, 1.0, scrapeAt(t, bAdmin).value(t, "chatd_relayed_connections_total", "via", "upgrade"))
	require.NoError(t, viaURL.WS.Close(websocket.StatusNormalClosure, ""))

	// The HTTP API: a rename on B is A's, a deletion on B closes A's tab with 4004.
	status, body := apiAt(t, http.MethodPatch, b.addr, "/v1/sessions/"+sessionID, `{"title":"relayed"}`)
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `"title":"relayed"`)
	doomed := wstest.Dial(t, a.wsURL(), nil)
	doomedID := doomed.Hello("").SessionID
	status, body = apiAt(t, http.MethodDelete, b.addr, "/v1/sessions/"+doomedID, "")
	require.Equal(t, http.StatusNoContent, status, body)
	require.Equal(t, websocket.StatusCode(4004), doomed.ExpectClose())
	require.Equal(t, 2.0, scrapeAt(t, bAdmin).value(t, "chatd_relayed_requests_total"))

	// Commands go through the relay: a second run, from B's client, with a tool call.
	ack2 := onB.Chat("req-2", "please call the tool")
	require.Equal(t, "ack", ack2.Type, "%s", ack2.Raw)
	onB.Await(func(f wstest.Frame) bool { return f.Type == "tool.end" })

	// A shuts down mid-run and gives its leases back: B's client is told the session
	// moved, and B serves it from then on.
	onA.WS.CloseNow() // a tab that does not read would hold A's shutdown up
	a.signal(syscall.SIGTERM)
	require.Equal(t, websocket.StatusCode(4010), onB.ExpectClose())
	again, catchUp := helloUntilServed(t, b.wsURL(), onB.State)
	if catchUp.ActiveRun != nil {
		end := again.ReadTerminal()
		require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
		require.Equal(t, ack2.RunID, end.RunID, "the same run")
	} else {
		// B's rescuer finished it before the client was back.
		require.Equal(t, ack2.RunID, catchUp.LastRun.RunID, "%s", catchUp.Raw)
		require.Equal(t, "done", catchUp.LastRun.Status, "%s", catchUp.Raw)
	}
	a.wait(15 * time.Second)
	require.Equal(t, chat.RunDone, getRun(t, st, ack2.RunID).Status)
	require.Empty(t, wstest.Diff(toWire(t, sessionMessages(t, st, sessionID)), again.State.Sorted()), "the reconnected client equals the database")
	m = scrapeAt(t, bAdmin)
	require.Equal(t, 1.0, m.value(t, "chatd_relayed_connections_total", "via", "hello"), "B served the reconnect itself")
	require.Equal(t, 0.0, m.value(t, "chatd_relayed_connections_open"))
}

// helloUntilServed reconnects to url with state until a hello is answered with a
// catch-up: while the node that went away still holds the session, the hello is answered
// moved (4010), and the client reconnects.
func helloUntilServed(t *testing.T, url string, state *wstest.State) (*wstest.Client, wstest.Frame) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := wstest.Dial(t, url, nil)
		c.State = state
		c.Send(map[string]any{"type": "hello", "sessionId": state.SessionID, "epoch": state.Epoch, "lastSeq": state.LastSeq})
		f, err := c.TryRead()
		require.NoError(t, err)
		if f.Type == "snapshot" || f.Type == "resumed" {
			return c, f
		}
		require.Equal(t, "error", f.Type, "%s", f.Raw)
		require.Equal(t, "moved", f.Code, "%s", f.Raw)
		code := c.ExpectClose()
		require.Equal(t, websocket.StatusCode(4010), code)
		require.True(t, time.Now().Before(deadline), "the session was not served by B in time")
	}
}
