package ws_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// tokenIsUser authenticates every token as the user it names: "" is the anonymous user.
type tokenIsUser struct{}

func (tokenIsUser) Authenticate(_ context.Context, _ *http.Request, token string) (string, error) {
	return token, nil
}

// testAddrHeader fakes a connection's remote address in these tests (ws.Config.RemoteHost);
// chatd itself trusts no header.
const testAddrHeader = "X-Test-Remote"

// limitsEnv is a server with the limits set turns on, whose connections authenticate
// with tokenIsUser and whose remote address is testAddrHeader's, when given.
func limitsEnv(t *testing.T, set func(*ws.Config)) (*env, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent: script.New(script.Text("ok")),
		wsConfig: metricsOption(transport.NewMetrics(reg), func(c *ws.Config) {
			c.Auth = tokenIsUser{}
			c.PingInterval = 24 * time.Hour
			c.HelloTimeout = 24 * time.Hour
			c.RemoteHost = func(r *http.Request) string {
				if a := r.Header.Get(testAddrHeader); a != "" {
					return a
				}
				host, _, _ := net.SplitHostPort(r.RemoteAddr)
				return host
			}
			set(c)
		}),
	})
	return e, reg
}

// rateLimited is chatd_rate_limited_total{limit}.
func rateLimited(t *testing.T, reg *prometheus.Registry, limit string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "chatd_rate_limited_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "limit" && l.GetValue() == limit {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("chatd_rate_limited_total{limit=%q} is not registered", limit)
	return 0
}

// from dials as user from addr ("" for the real one).
func from(e *env, user, addr string) *wstest.Client {
	e.t.Helper()
	var opts *wstest.DialOptions
	if addr != "" {
		opts = wstest.Header(testAddrHeader, addr)
	}
	c := wstest.Dial(e.t, e.URL, opts)
	c.Token = user
	return c
}

// served checks that the server answers c: an unknown frame gets its error.
func served(t *testing.T, c *wstest.Client, requestID string) {
	t.Helper()
	c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": requestID})
	f := c.ReadReply(requestID)
	require.Equal(t, "unknown_type", f.Code, "reply: %s", f.Raw)
}

// A connection over its command bucket is answered rate_limited, with the requestId,
// and the command is not handled; the connection stays open, the bucket refills with
// time, and another connection has a bucket of its own.
func TestCommandRateLimit(t *testing.T) {
	t.Parallel()
	e, reg := limitsEnv(t, func(c *ws.Config) {
		c.CommandRate = 1
		c.CommandBurst = 3
	})
	a := from(e, "alice", "")
	a.Hello("") // token 1
	served(t, a, "u1")
	served(t, a, "u2")

	a.Send(map[string]any{"type": "chat.send", "requestId": "over", "content": "hi"})
	f := a.ReadReply("over")
	require.Equal(t, "error", f.Type)
	require.Equal(t, "rate_limited", f.Code, "reply: %s", f.Raw)
	a.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "over2"})
	require.Equal(t, "rate_limited", a.ReadReply("over2").Code)
	require.EqualValues(t, 2, rateLimited(t, reg, transport.LimitCommand))

	// The control connection of another user is unaffected.
	b := from(e, "bob", "")
	b.Hello("")
	require.Equal(t, "ack", b.Chat("b1", "hi").Type)
	b.ReadTerminal()

	// A second later a has a token again, on the same connection: the refused chat.send
	// started nothing.
	e.WSClock.Advance(time.Second)
	require.Equal(t, "ack", a.Chat("again", "hi").Type)
	a.ReadTerminal()
	require.Len(t, e.dbMessages(a.State.SessionID), 2, "one user message and its answer: the refused send was not handled")
	require.EqualValues(t, 2, rateLimited(t, reg, transport.LimitCommand))
}

// A user's connection beyond MaxConnsPerUser is answered rate_limited at hello and closed
// with 4029; other users, and the anonymous user, are not limited by it; a closed
// connection frees its place.
func TestConnsPerUserLimit(t *testing.T) {
	t.Parallel()
	e, reg := limitsEnv(t, func(c *ws.Config) { c.MaxConnsPerUser = 2 })
	a1 := from(e, "alice", "")
	a1.Hello("")
	a2 := from(e, "alice", "")
	a2.Hello("")

	a3 := from(e, "alice", "")
	a3.Send(map[string]any{"type": "hello", "requestId": "h", "token": "alice"})
	f := a3.ReadReply("h")
	require.Equal(t, "rate_limited", f.Code, "reply: %s", f.Raw)
	require.EqualValues(t, 4029, a3.ExpectClose())
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitUserConns))

	// Control: another user, and anonymous clients beyond the limit.
	b := from(e, "bob", "")
	b.Hello("")
	require.Equal(t, "ack", b.Chat("b1", "hi").Type)
	for range 3 {
		from(e, "", "").Hello("")
	}
	served(t, a1, "still")

	// Once a1 is gone, alice may connect again.
	require.NoError(t, a1.WS.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool {
		c, err := wstest.TryDial(t, e.URL, nil)
		if err != nil {
			return false
		}
		defer c.WS.CloseNow()
		c.Send(map[string]any{"type": "hello", "requestId": "h", "token": "alice"})
		f, err := c.TryRead()
		return err == nil && f.Type == "snapshot"
	}, 10*time.Second, 20*time.Millisecond)
}

// A connection beyond MaxConnsPerAddr from one address is closed with 4029 right after
// the upgrade; another address is unaffected, and a closed connection frees its place.
func TestConnsPerAddrLimit(t *testing.T) {
	t.Parallel()
	e, reg := limitsEnv(t, func(c *ws.Config) { c.MaxConnsPerAddr = 2 })
	a1 := from(e, "alice", "10.0.0.1")
	served(t, a1, "1")
	a2 := from(e, "bob", "10.0.0.1")
	served(t, a2, "2")

	a3 := from(e, "carol", "10.0.0.1")
	require.EqualValues(t, 4029, a3.ExpectClose())
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitAddrConns))

	control := from(e, "alice", "10.0.0.2")
	control.Hello("")
	served(t, a1, "still")

	require.NoError(t, a1.WS.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool {
		c, err := wstest.TryDial(t, e.URL, wstest.Header(testAddrHeader, "10.0.0.1"))
		if err != nil {
			return false
		}
		defer c.WS.CloseNow()
		c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "x"})
		f, err := c.TryRead()
		return err == nil && f.Code == "unknown_type"
	}, 10*time.Second, 20*time.Millisecond)
}

// An upgrade beyond an address's handshake bucket is answered 429 with Retry-After;
// another address is unaffected; the bucket refills with time; and buckets of addresses
// gone quiet are dropped.
func TestHandshakeRateLimit(t *testing.T) {
	t.Parallel()
	e, reg := limitsEnv(t, func(c *ws.Config) {
		c.HandshakeRate = 0.5
		c.HandshakeBurst = 2
	})
	for i := range 2 {
		served(t, from(e, "alice", "10.0.0.1"), string(rune('a'+i)))
	}

	dial := func(addr string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wstest.ReadTimeout)
		defer cancel()
		c, resp, err := websocket.Dial(ctx, e.URL, wstest.Header(testAddrHeader, addr))
		if c != nil {
			t.Cleanup(func() { c.CloseNow() })
		}
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		return c, resp, err
	}
	_, resp, err := dial("10.0.0.1")
	require.Error(t, err)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"))
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitHandshake))

	// Control: another address.
	served(t, from(e, "bob", "10.0.0.2"), "control")

	// Two seconds later, one more.
	e.WSClock.Advance(2 * time.Second)
	_, _, err = dial("10.0.0.1")
	require.NoError(t, err)
	require.Equal(t, 2, ws.HandshakeLimiters(e.ws))

	// Long after, a handshake from a new address sweeps the quiet ones' buckets.
	e.WSClock.Advance(2 * time.Minute)
	served(t, from(e, "carol", "10.0.0.3"), "new")
	require.Equal(t, 1, ws.HandshakeLimiters(e.ws))
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitHandshake))
}

// A user's active runs are limited across their sessions: one run over the limit is
// answered rate_limited, stores nothing and is counted; another user, and the anonymous
// user (every client of a chatd without authentication), are not held back by it; once
// one of the runs ends there is room again.
func TestActiveRunsPerUserLimit(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOptions{
		agent: script.PerRun(func(req conversation.Request) []script.Step {
			if req.Content == "hold" {
				return []script.Step{script.Text("working"), script.Hang()}
			}
			return []script.Step{script.Text("ok")}
		}),
		conv: func(c *conversation.Config) { c.MaxRunsPerUser = 2 },
		wsConfig: metricsOption(transport.NewMetrics(reg), func(c *ws.Config) {
			c.Auth = tokenIsUser{}
			c.PingInterval = 24 * time.Hour
			c.HelloTimeout = 24 * time.Hour
		}),
	})
	open := func(user string) *wstest.Client {
		c := from(e, user, "")
		c.Hello("")
		return c
	}
	a1, a2, a3 := open("alice"), open("alice"), open("alice")
	require.Equal(t, "ack", a1.Chat("r1", "hold").Type)
	require.Equal(t, "ack", a2.Chat("r2", "hold").Type)
	f := a3.Chat("r3", "hold")
	require.Equal(t, "error", f.Type)
	require.Equal(t, "rate_limited", f.Code, "reply: %s", f.Raw)
	require.Contains(t, f.ErrorText, "at most 2")
	require.Empty(t, e.dbMessages(a3.State.SessionID), "the refused send stored nothing")
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitRuns))

	// Bob, and the anonymous user, are not alice.
	b := open("bob")
	require.Equal(t, "ack", b.Chat("b1", "hi").Type)
	require.Equal(t, "chat.done", b.ReadTerminal().Type)
	for i := range 3 {
		anon := open("")
		require.Equal(t, "ack", anon.Chat(fmt.Sprintf("n%d", i), "hold").Type, "the anonymous user has no limit")
	}

	// One of alice's runs ends: the refused message can be sent again.
	a1.Send(map[string]any{"type": "chat.cancel", "requestId": "c1"})
	require.Equal(t, "chat.cancelled", a1.ReadTerminal().Type)
	require.Equal(t, "ack", a3.Chat("r3", "hold").Type)
	require.EqualValues(t, 1, rateLimited(t, reg, transport.LimitRuns))
}
