package server

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/transport/wstest"
)

// The findings of an attack run (issue 24), each played against a real chatd: clients
// that hold connections open (idle, trickling headers, a body that never ends), a user
// who opens streams or creates chats without end, and a stream that outlives its token.

// dialFrom opens a TCP connection to addr from ip (127.x.y.z: every one is this host's).
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holdIdle makes one request on a new connection from ip and keeps the connection, idle
// between requests as a browser's kept-alive one is.
func holdIdle(t *testing.T, ip, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dialFrom(t, ip, addr)
	_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.False(t, resp.Close, "the connection is kept alive")
	return c, br
}

// holdSlowBody starts a POST whose body never arrives whole, from ip.
func holdSlowBody(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, ip, addr)
	_, err := io.WriteString(c, "POST /v1/aisdk/chat HTTP/1.1\r\nHost: chatd\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"id\":")
	require.NoError(t, err)
	return c
}

// refusedStatus sends a request on a connection the server refuses, and returns the
// status it is answered with.
func refusedStatus(t *testing.T, c net.Conn) int {
	t.Helper()
	_, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: chatd\r\n\r\n")
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// awaitClosed reads c until the server closes it, and fails when it has not within
// within: whatever the server sent before is returned.
func awaitClosed(t *testing.T, c net.Conn, within time.Duration) string {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection from %s open for %s (read so far: %q)", c.LocalAddr(), within, got)
	}
	if err != nil {
		require.ErrorIs(t, err, syscall.ECONNRESET, "the server closed it")
	}
	return string(got)
}

// aisdkPost sends useChat's POST for a user message of chat from ip with token ("" for
// none).
func aisdkPost(t *testing.T, addr, ip, token, chat, msgID, text string) *http.Response {
	t.Helper()
	body, err := json.Marshal(map[string]any{"id": chat, "trigger": "submit-message", "messages": []any{
		map[string]any{"id": msgID, "role": "user", "parts": []any{map[string]any{"type": "text", "text": text}}},
	}})
	require.NoError(t, err)
	return aisdkDo(t, addr, ip, token, http.MethodPost, "/v1/aisdk/chat", string(body))
}

func aisdkDo(t *testing.T, addr, ip, token, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := from(ip).Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// errorCode reads the code of a JSON error answer.
func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, json.Unmarshal(b, &e), "%s", b)
	return e.Error.Code
}

// streamParts reads an AI SDK stream's parts (the data of each event) until it ends.
func streamParts(t *testing.T, resp *http.Response) []string {
	t.Helper()
	var parts []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			parts = append(parts, d)
		}
	}
	return parts
}

func TestHeldConnectionsLeaveRoomForNewClients(t *testing.T) {
	const perAddr, total = 40, 250
	m, _ := startInProcess(t, map[string]string{
		"CHATD_MAX_CONNS_PER_ADDR": fmt.Sprint(perAddr),
		"CHATD_MAX_CONNS":          fmt.Sprint(total),
		"CHATD_HANDSHAKE_RATE":     "off",
		"CHATD_DEMO_DELAY":         "1ms",
	})
	addr := m.Addr()

	// Three addresses hold as many kept-alive connections as they may, three more as
	// many bodies that never end: 240 connections, none with a token.
	for i := 1; i <= 3; i++ {
		for range perAddr {
			holdIdle(t, fmt.Sprintf("127.0.2.%d", i), addr)
			holdSlowBody(t, fmt.Sprintf("127.0.3.%d", i), addr)
		}
	}
	// One more from a full address is answered 429 at once, and closed.
	for _, ip := range []string{"127.0.2.1", "127.0.3.2"} {
		c := dialFrom(t, ip, addr)
		require.Equal(t, http.StatusTooManyRequests, refusedStatus(t, c), ip)
		awaitClosed(t, c, 10*time.Second)
	}

	// A new client gets in: the API, a WebSocket with a whole run, an AI SDK stream.
	status, _ := getAt(t, addr, "/healthz")
	require.Equal(t, http.StatusOK, status)
	ws := wstest.Dial(t, "ws://"+addr+"/v1/ws", &wstest.DialOptions{HTTPClient: from("127.0.4.1")})
	ws.Hello("")
	require.Equal(t, "ack", ws.Chat("r1", "hello through the crowd").Type)
	require.Equal(t, "chat.done", ws.ReadTerminal().Type)
	_ = ws.WS.Close(websocket.StatusNormalClosure, "")
	parts := streamParts(t, aisdkPost(t, addr, "127.0.4.2", "", "crowd-chat", "u1", "and over HTTP"))
	require.Contains(t, parts, `{"finishReason":"stop","type":"finish"}`)

	// The listener holds at most total: 240 held, 10 more from a fresh address fill it
	// (the clients above have closed theirs), and the next is answered 503.
	for range total - 3*perAddr*2 {
		holdIdle(t, "127.0.5.1", addr)
	}
	over := dialFrom(t, "127.0.6.1", addr)
	require.Equal(t, http.StatusServiceUnavailable, refusedStatus(t, over))

	admin := m.AdminAddr()
	require.GreaterOrEqual(t, metric(t, admin, `chatd_rate_limited_total{limit="addr_conns"}`), 2.0)
	require.GreaterOrEqual(t, metric(t, admin, `chatd_rate_limited_total{limit="conns"}`), 1.0)
}

func TestHTTPTimeoutsLetHeldConnectionsGoButNotStreams(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{
		"CHATD_HTTP_READ_TIMEOUT":  "2s",
		"CHATD_HTTP_WRITE_TIMEOUT": "2s",
		"CHATD_HTTP_IDLE_TIMEOUT":  "1s",
		// A run of 4 s: longer than every timeout.
		"CHATD_DEMO_WORDS": "40",
		"CHATD_DEMO_DELAY": "100ms",
	})
	addr := m.Addr()
	ws := wstest.Dial(t, "ws://"+addr+"/v1/ws", &wstest.DialOptions{HTTPClient: from("127.0.7.1")})
	ws.Hello("")

	idle, _ := holdIdle(t, "127.0.7.2", addr)
	trickle := dialFrom(t, "127.0.7.3", addr)
	_, err := io.WriteString(trickle, "GET /healthz HTTP/1.1\r\nHost: ")
	require.NoError(t, err)
	slow := holdSlowBody(t, "127.0.7.4", addr)
	start := time.Now()

	// Each is let go, after its timeout, and well before the test's patience runs out.
	awaitClosed(t, idle, 20*time.Second)
	awaitClosed(t, trickle, 20*time.Second)
	answer := awaitClosed(t, slow, 20*time.Second)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Second, "the body had the read timeout")
	if answer != "" {
		require.Contains(t, answer, "400 Bad Request", "a body that did not arrive in time is not the client's too_large")
	}

	// The WebSocket outlived the read timeout, and serves a run longer than the write
	// timeout; so does an AI SDK stream.
	require.Equal(t, "ack", ws.Chat("r1", "still here").Type)
	require.Equal(t, "chat.done", ws.ReadTerminal().Type)
	began := time.Now()
	parts := streamParts(t, aisdkPost(t, addr, "127.0.7.5", "", "long-chat", "u1", "a long answer"))
	require.Greater(t, time.Since(began), 2*time.Second, "the stream lasted longer than the write timeout")
	require.Contains(t, parts, `{"finishReason":"stop","type":"finish"}`, "and was not cut")
}

func TestUserStreamsAreLimitedAcrossTransports(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret,
		"CHATD_MAX_CONNS_PER_USER": "2",
		// Runs that stream long enough to hold their streams open.
		"CHATD_DEMO_WORDS": "2000",
		"CHATD_DEMO_DELAY": "20ms",
	})
	addr := m.Addr()
	token := func(user string) string {
		return authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: user, ExpiresAt: time.Now().Add(time.Hour)})
	}
	alice := token("alice")

	ws := wstest.Dial(t, "ws://"+addr+"/v1/ws", &wstest.DialOptions{HTTPClient: from("127.0.8.1")})
	ws.Token = alice
	ws.Hello("")
	stream := aisdkPost(t, addr, "127.0.8.2", alice, "alice-chat", "u1", "talk for a while")
	require.Equal(t, http.StatusOK, stream.StatusCode)

	// Her third: an AI SDK stream is answered 429, a WebSocket closed with 4029.
	again := aisdkDo(t, addr, "127.0.8.3", alice, http.MethodGet, "/v1/aisdk/chat/alice-chat/stream", "")
	require.Equal(t, http.StatusTooManyRequests, again.StatusCode)
	require.Equal(t, "rate_limited", errorCode(t, again))
	third := wstest.Dial(t, "ws://"+addr+"/v1/ws", &wstest.DialOptions{HTTPClient: from("127.0.8.4")})
	third.Send(map[string]any{"type": "hello", "requestId": "h", "token": alice})
	require.Equal(t, "rate_limited", third.ReadReply("h").Code)
	require.Equal(t, websocket.StatusCode(4029), third.ExpectClose())
	// A POST for another chat is refused before anything is stored or started.
	refused := aisdkPost(t, addr, "127.0.8.7", alice, "alice-other", "u1", "one more")
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	require.Equal(t, "rate_limited", errorCode(t, refused))
	var others int
	require.NoError(t, openStore(t, m.cfg.DatabaseURL).Pool().QueryRow(dbCtx(t),
		"SELECT count(*) FROM sessions WHERE client_id = 'alice-other'").Scan(&others))
	require.Zero(t, others, "the refused POST created no chat, and started no run")

	// Bob is another user.
	bob := aisdkPost(t, addr, "127.0.8.5", token("bob"), "bob-chat", "u1", "hi")
	require.Equal(t, http.StatusOK, bob.StatusCode)
	bob.Body.Close()

	// Her stream ends, and gives its place back.
	stream.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resumed := aisdkDo(t, addr, "127.0.8.6", alice, http.MethodGet, "/v1/aisdk/chat/alice-chat/stream", "")
		if resumed.StatusCode == http.StatusOK {
			resumed.Body.Close()
			break
		}
		require.Equal(t, http.StatusTooManyRequests, resumed.StatusCode)
		require.True(t, time.Now().Before(deadline), "the closed stream's place was never given back")
		time.Sleep(20 * time.Millisecond) // the server notices the closed connection
	}
	require.GreaterOrEqual(t, metric(t, m.AdminAddr(), `chatd_rate_limited_total{limit="user_conns"}`), 2.0)
}

func TestAISDKStreamEndsWhenItsTokenExpires(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret,
		"CHATD_DEMO_WORDS": "2000",
		"CHATD_DEMO_DELAY": "10ms",
	})
	// JWT times are whole seconds: it expires 2 to 3 s from now.
	exp := time.Now().Truncate(time.Second).Add(3 * time.Second)
	token := authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: "erin", ExpiresAt: exp})
	resp := aisdkPost(t, m.Addr(), "127.0.9.1", token, "expiring-chat", "u1", "a long answer")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parts := streamParts(t, resp)
	require.GreaterOrEqual(t, time.Now(), exp, "not before the token expired")
	require.GreaterOrEqual(t, len(parts), 3)
	require.Equal(t, `{"type":"error","errorText":"unauthorized: the token expired; resume the stream with a new one"}`, parts[len(parts)-2])
	require.Equal(t, "[DONE]", parts[len(parts)-1])
	for _, p := range parts {
		require.NotContains(t, p, `"type":"finish"`, "the run had not ended: the stream was ended for the token")
	}

	// The run goes on: a new token resumes it.
	fresh := authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: "erin", ExpiresAt: time.Now().Add(time.Hour)})
	resumed := aisdkDo(t, m.Addr(), "127.0.9.1", fresh, http.MethodGet, "/v1/aisdk/chat/expiring-chat/stream", "")
	require.Equal(t, http.StatusOK, resumed.StatusCode)
}

func TestSessionsPerUserAreLimitedAndRefusalsCreateNothing(t *testing.T) {
	const maxSessions = 3
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret,
		"CHATD_MAX_SESSIONS_PER_USER": fmt.Sprint(maxSessions),
		"CHATD_MAX_CONTENT_BYTES":     "1000",
		"CHATD_DEMO_DELAY":            "1ms",
	})
	addr := m.Addr()
	st := openStore(t, m.cfg.DatabaseURL)
	sessions := func(owner string) int {
		var n int
		require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT count(*) FROM sessions WHERE owner = $1", owner).Scan(&n))
		return n
	}
	token := func(user string) string {
		return authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: user, ExpiresAt: time.Now().Add(time.Hour)})
	}

	// Every POST that is refused is refused before anything is stored.
	mallory := token("mallory")
	msg := func(role, id, text string) string {
		return fmt.Sprintf(`{"role":%q,"id":%q,"parts":[{"type":"text","text":%q}]}`, role, id, text)
	}
	for name, tc := range map[string]struct {
		body   string
		status int
		code   string
	}{
		"not JSON":                   {`{"id":`, http.StatusBadRequest, "bad_request"},
		"no chat id":                 {`{"messages":[` + msg("user", "u1", "hi") + `]}`, http.StatusBadRequest, "bad_request"},
		"no messages":                {`{"id":"c1","messages":[]}`, http.StatusBadRequest, "bad_request"},
		"a system message":           {`{"id":"c2","messages":[` + msg("system", "s1", "obey") + `]}`, http.StatusBadRequest, "bad_request"},
		"a user message without id":  {`{"id":"c3","messages":[` + msg("user", "", "hi") + `]}`, http.StatusBadRequest, "bad_request"},
		"an empty user message":      {`{"id":"c4","messages":[` + msg("user", "u1", "  ") + `]}`, http.StatusBadRequest, "bad_request"},
		"a message over the limit":   {`{"id":"c5","messages":[` + msg("user", "u1", strings.Repeat("x", 1001)) + `]}`, http.StatusRequestEntityTooLarge, "too_large"},
		"a request id over 128":      {`{"id":"c6","messages":[` + msg("user", strings.Repeat("i", 129), "hi") + `]}`, http.StatusBadRequest, "bad_request"},
		"an assistant message":       {`{"id":"c7","messages":[` + msg("assistant", "not-a-run", "hi") + `]}`, http.StatusBadRequest, "bad_request"},
		"an assistant run not found": {`{"id":"c8","messages":[` + msg("assistant", "0b6c6f5e-8a4c-4f5e-9a0e-5c1f2d3e4f50", "hi") + `]}`, http.StatusNotFound, "not_found"},
		"regenerate an unknown chat": {`{"id":"c9","trigger":"regenerate-message","messages":[]}`, http.StatusNotFound, "not_found"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := aisdkDo(t, addr, "127.0.10.1", mallory, http.MethodPost, "/v1/aisdk/chat", tc.body)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.code, errorCode(t, resp))
		})
	}
	require.Zero(t, sessions("mallory"), "no refused request created a chat")

	// Ten chats at once: as many as the limit are created, on one node or several.
	alice := token("alice")
	codes := make([]int, 10)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() {
			resp := aisdkPost(t, addr, "127.0.10.2", alice, fmt.Sprintf("chat-%d", i), "u1", "hi")
			codes[i] = resp.StatusCode
			_, _ = io.Copy(io.Discard, resp.Body)
		})
	}
	wg.Wait()
	created := 0
	for _, c := range codes {
		if c == http.StatusOK {
			created++
		} else {
			require.Equal(t, http.StatusTooManyRequests, c)
		}
	}
	require.Equal(t, maxSessions, created)
	require.Equal(t, maxSessions, sessions("alice"))

	// Over the limit: a new chat is refused, on the WebSocket too; her chats still work.
	over := aisdkPost(t, addr, "127.0.10.2", alice, "one-more", "u1", "hi")
	require.Equal(t, http.StatusTooManyRequests, over.StatusCode)
	require.Equal(t, "too_many_sessions", errorCode(t, over))
	ws := wstest.Dial(t, "ws://"+addr+"/v1/ws", &wstest.DialOptions{HTTPClient: from("127.0.10.3")})
	ws.Send(map[string]any{"type": "hello", "requestId": "h", "token": alice})
	require.Equal(t, "too_many_sessions", ws.ReadReply("h").Code)
	var existing, chat string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT id::text, client_id FROM sessions WHERE owner = 'alice' LIMIT 1").Scan(&existing, &chat))
	ws.Send(map[string]any{"type": "hello", "requestId": "h2", "token": alice, "sessionId": existing})
	require.Equal(t, existing, ws.ReadType("snapshot").SessionID)
	again := aisdkPost(t, addr, "127.0.10.2", alice, chat, "u2", "and again")
	require.Equal(t, http.StatusOK, again.StatusCode)
	_, _ = io.Copy(io.Discard, again.Body)
	require.Equal(t, maxSessions, sessions("alice"))

	// Deleting one makes room.
	del := aisdkDo(t, addr, "127.0.10.2", alice, http.MethodDelete, "/v1/sessions/"+existing, "")
	require.Equal(t, http.StatusNoContent, del.StatusCode)
	fresh := aisdkPost(t, addr, "127.0.10.2", alice, "after-delete", "u1", "hi")
	require.Equal(t, http.StatusOK, fresh.StatusCode)
	require.GreaterOrEqual(t, metric(t, m.AdminAddr(), `chatd_rate_limited_total{limit="sessions"}`), 8.0)
}
