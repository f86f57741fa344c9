package ws_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// waitTimeout bounds each wait for something that should happen at once; a test that waits
// longer has hung.
const waitTimeout = 10 * time.Second

func waitContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// livenessEnv is newEnv with an agent that is never asked for much: these tests start no
// runs.
func livenessEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	o.agent = script.New(script.Text("ok"))
	return newEnv(t, o)
}

// bgReader reads a client's connection in the background, as a browser does, so that the
// client's WebSocket library handles pings (coder/websocket only does so inside Read).
type bgReader struct {
	c      *wstest.Client
	frames chan wstest.Frame
	err    chan error // the error that ended reading
}

func readInBackground(t *testing.T, c *wstest.Client) *bgReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &bgReader{c: c, frames: make(chan wstest.Frame, 64), err: make(chan error, 1)}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		for {
			_, b, err := c.WS.Read(ctx)
			if err != nil {
				r.err <- err
				return
			}
			f, err := wstest.Decode(b)
			if err != nil {
				r.err <- err
				return
			}
			select {
			case r.frames <- f:
			case <-ctx.Done():
				r.err <- ctx.Err()
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel() // ends the Read (and closes the connection)
		<-exited
	})
	return r
}

// roundTrip sends a history.fetch and requires that the next frame is its reply.
func (r *bgReader) roundTrip(ctx context.Context, t *testing.T, requestID string) {
	t.Helper()
	r.c.Send(map[string]any{"type": "history.fetch", "requestId": requestID, "limit": 1})
	select {
	case f := <-r.frames:
		require.Equal(t, "history", f.Type, "reply to %s: %s", requestID, f.Raw)
		require.Equal(t, requestID, f.RequestID, "reply to %s: %s", requestID, f.Raw)
	case err := <-r.err:
		t.Fatalf("connection ended while waiting for the reply to %s: %v", requestID, err)
	case <-ctx.Done():
		t.Fatalf("no reply to %s", requestID)
	}
}

func (r *bgReader) waitPing(ctx context.Context, t *testing.T, pings <-chan struct{}) {
	t.Helper()
	select {
	case <-pings:
	case err := <-r.err:
		t.Fatalf("connection ended while waiting for a ping: %v", err)
	case <-ctx.Done():
		t.Fatal("the server did not ping")
	}
}

// pingClient dials with a ping hook: each received ping is signalled on the returned
// channel, and answered only when answer is true.
func pingClient(t *testing.T, e *env, answer bool) (*wstest.Client, <-chan struct{}) {
	t.Helper()
	pings := make(chan struct{}, 16)
	c := wstest.Dial(t, e.URL, &wstest.DialOptions{
		OnPingReceived: func(context.Context, []byte) bool {
			select {
			case pings <- struct{}{}:
			default:
			}
			return answer
		},
	})
	c.Hello("")
	// The reply comes after hello has been handled entirely: its timer is stopped, so the
	// only timer of the connection is the ping timer.
	requireHistory(t, c, "after-hello")
	return c, pings
}

func TestHelloDeadline(t *testing.T) {
	t.Parallel()
	e := livenessEnv(t, envOptions{})
	ctx := waitContext(t)

	silent := e.dial() // never says hello
	early := e.dial()  // says hello at once
	late := e.dial()   // says hello just before the deadline
	// Each connection arms a hello timer and a ping timer.
	require.NoError(t, e.WSClock.BlockUntilContext(ctx, 6))

	early.Hello("")
	requireHistory(t, early, "early-1")

	e.WSClock.Advance(ws.DefaultHelloTimeout - time.Millisecond)
	late.Hello("")
	requireHistory(t, late, "late-1")

	e.WSClock.Advance(time.Millisecond)
	require.Equal(t, websocket.StatusCode(4000), silent.ExpectClose())

	// The deadline has passed for all three; the two that said hello in time are served.
	requireHistory(t, early, "early-2")
	requireHistory(t, late, "late-2")
}

// pingArms is the connections' fake clock, telling each time a ping timer is armed. After
// a ping the next one is armed by the ping's goroutine once Ping has returned, and
// nothing the client sees says when: the server having read the pong is not enough (the
// goroutine may not have run since), and until then the clock's one timer is the ping's
// timeout, so counting timers cannot tell the two apart. An advance made before the
// re-arm moves the next ping out by as much, and the test waits for a ping that never
// comes.
type pingArms struct {
	*clockwork.FakeClock
	armed chan struct{}
}

func newPingArms() *pingArms { return &pingArms{armed: make(chan struct{}, 16)} }

// install makes the server's connections use a, on the fake clock newEnv gave them.
func (a *pingArms) install(c *ws.Config) {
	a.FakeClock = c.Clock.(*clockwork.FakeClock)
	c.Clock = a
}

func (a *pingArms) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	t := a.FakeClock.AfterFunc(d, f)
	if d == ws.DefaultPingInterval { // no other timer of a connection is this long
		select {
		case a.armed <- struct{}{}:
		default: // more arms than the test waits for; it would time out waiting
		}
	}
	return t
}

// wait returns once the next ping timer has been armed.
func (a *pingArms) wait(ctx context.Context, t *testing.T) {
	t.Helper()
	select {
	case <-a.armed:
	case <-ctx.Done():
		t.Fatal("the server did not arm its next ping")
	}
}

func TestPingKeepsReadingClientOpen(t *testing.T) {
	t.Parallel()
	arms := newPingArms()
	e := livenessEnv(t, envOptions{wsConfig: arms.install})
	ctx := waitContext(t)
	c, pings := pingClient(t, e, true)
	r := readInBackground(t, c)

	for i := range 4 {
		// The first ping timer is armed when the connection starts; each next one after
		// the ping before it was answered.
		arms.wait(ctx, t)
		e.WSClock.Advance(ws.DefaultPingInterval)
		r.waitPing(ctx, t, pings)
		// The reply to the first request comes after the client's reader has handled the
		// ping, so its pong is written; the second request is on the wire behind that pong,
		// so its reply means the server has read the pong.
		r.roundTrip(ctx, t, fmt.Sprintf("ping-%d-a", i))
		r.roundTrip(ctx, t, fmt.Sprintf("ping-%d-b", i))
	}

	// A whole ping timeout later nothing has cut the connection, and no other ping came.
	// The last ping's timeout is stopped before the next ping is armed.
	arms.wait(ctx, t)
	e.WSClock.Advance(ws.DefaultPingTimeout)
	r.roundTrip(ctx, t, "final")
	require.Empty(t, pings, "more pings than ping intervals")
}

func TestPingClosesUnresponsiveClient(t *testing.T) {
	t.Parallel()
	e := livenessEnv(t, envOptions{})
	ctx := waitContext(t)
	// The client keeps reading, so the test sees what happens, but never answers a ping.
	c, pings := pingClient(t, e, false)
	r := readInBackground(t, c)

	require.NoError(t, e.WSClock.BlockUntilContext(ctx, 1)) // the ping timer
	e.WSClock.Advance(ws.DefaultPingInterval)
	r.waitPing(ctx, t, pings)

	// Just before the ping timeout the connection is still served.
	e.WSClock.Advance(ws.DefaultPingTimeout - time.Millisecond)
	r.roundTrip(ctx, t, "before-timeout")

	e.WSClock.Advance(time.Millisecond)
	select {
	case err := <-r.err:
		require.Error(t, err)
		require.False(t, errors.Is(err, context.Canceled), "the test's own cancellation: %v", err)
		t.Logf("connection ended: %v (close status %d)", err, websocket.CloseStatus(err))
	case f := <-r.frames:
		t.Fatalf("unexpected frame instead of the close: %s", f.Raw)
	case <-ctx.Done():
		t.Fatal("a connection that did not answer a ping was not closed after the ping timeout")
	}
}

func TestOrigins(t *testing.T) {
	t.Parallel()
	const self = "self" // the server's own origin
	cases := []struct {
		name     string
		allowed  []string
		origin   string // "" sends no Origin header
		accepted bool
	}{
		{name: "other host refused", origin: "https://evil.example"},
		{name: "other host listed as a host", allowed: []string{"evil.example"}, origin: "https://evil.example", accepted: true},
		{name: "other host listed with its scheme", allowed: []string{"https://evil.example"}, origin: "https://evil.example", accepted: true},
		{name: "other host listed with another scheme", allowed: []string{"https://evil.example"}, origin: "http://evil.example"},
		{name: "same origin", origin: self, accepted: true},
		{name: "no origin", accepted: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := livenessEnv(t, envOptions{wsConfig: func(c *ws.Config) { c.AllowedOrigins = tc.allowed }})
			origin := tc.origin
			if origin == self {
				origin = e.ts.URL
			}
			var opts *wstest.DialOptions
			if origin != "" {
				opts = wstest.Header("Origin", origin)
			}
			c := wstest.Dial(t, e.URL, opts)
			if !tc.accepted {
				require.Equal(t, websocket.StatusPolicyViolation, c.ExpectClose())
				return
			}
			c.Hello("")
			requireHistory(t, c, "origin-accepted")
		})
	}
}

func TestSubprotocol(t *testing.T) {
	t.Parallel()
	e := livenessEnv(t, envOptions{})

	c := wstest.Dial(t, e.URL, &wstest.DialOptions{Subprotocols: []string{"chatd.v1"}})
	require.Equal(t, "chatd.v1", c.WS.Subprotocol())
	c.Hello("")
	requireHistory(t, c, "with-subprotocol")

	// Not offering it is fine too.
	plain := e.dial()
	require.Empty(t, plain.WS.Subprotocol())
	plain.Hello("")
}

// blockingAuth holds every hello in Authenticate until the test releases it, so a test can
// keep a hello "in progress" while it moves the clock.
type blockingAuth struct {
	entered chan struct{}
	release chan struct{}
}

func (a blockingAuth) Authenticate(ctx context.Context, _ *http.Request, _ string) (string, error) {
	a.entered <- struct{}{}
	select {
	case <-a.release:
		return "", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// A hello that arrived before the deadline is answered even if answering it takes past the
// deadline; a hello that then fails leaves a connection with no hello, which is closed.
func TestHelloDeadlineDuringASlowHello(t *testing.T) {
	t.Parallel()
	auth := blockingAuth{entered: make(chan struct{}), release: make(chan struct{})}
	e := livenessEnv(t, envOptions{wsConfig: func(c *ws.Config) { c.Auth = auth }})
	ctx := waitContext(t)

	pass := func(c *wstest.Client, hello map[string]any) {
		t.Helper()
		c.SendUnchecked(hello) // the bad one's sessionId is not a UUID
		select {
		case <-auth.entered:
		case <-ctx.Done():
			t.Fatal("hello never reached the authenticator")
		}
		// The connection's hello timer and ping timer, now past the deadline.
		e.WSClock.Advance(ws.DefaultHelloTimeout + time.Second)
		auth.release <- struct{}{}
	}

	ok := e.dial()
	pass(ok, map[string]any{"type": "hello"})
	require.Equal(t, "snapshot", ok.Read().Type)
	require.Equal(t, "ack", ok.Chat("r1", "still here").Type, "the connection must stay open")

	bad := e.dial()
	pass(bad, map[string]any{"type": "hello", "sessionId": "not-a-uuid"})
	reply := bad.Read()
	require.Equal(t, "bad_request", reply.Code)
	require.Equal(t, websocket.StatusCode(4000), bad.ExpectClose())
}

// A hello the server fails (its database unavailable) is not the client's fault: the
// client may say hello again, as the protocol says, and has the whole deadline again from
// each such answer, however long the outage lasts. One that then says nothing is closed
// a deadline after the last answer.
func TestHelloDeadlineAfterAHelloTheServerFailed(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	e := livenessEnv(t, envOptions{
		conv: func(c *conversation.Config) {
			c.Store = slowStore{Store: c.Store, wait: func(context.Context) error {
				if down.Load() {
					return errors.New("the database is unavailable")
				}
				return nil
			}}
		},
		// No ping within the test's 42 s: its timeout would race the clock's advances.
		wsConfig: func(c *ws.Config) { c.PingInterval = 24 * time.Hour },
	})
	ctx := waitContext(t)
	hello := func(c *wstest.Client, id string) {
		t.Helper()
		c.Send(map[string]any{"type": "hello", "requestId": id})
		f := c.Read()
		require.Equal(t, "error", f.Type, "%s", f.Raw)
		require.Equal(t, "storage", f.Code, "%s", f.Raw)
	}
	// settled waits until the worker is done with the failed hello (and has armed the
	// deadline again): a command behind it is answered after it.
	settled := func(c *wstest.Client, id string) {
		t.Helper()
		c.Send(map[string]any{"type": "history.fetch", "requestId": id})
		require.Equal(t, "storage", c.ReadReply(id).Code)
	}

	down.Store(true)
	retrying := e.dial()
	silent := e.dial()
	// Each connection arms a hello timer and a ping timer.
	require.NoError(t, e.WSClock.BlockUntilContext(ctx, 4))
	hello(retrying, "h1")
	hello(silent, "s1")
	settled(silent, "s2")
	for i := range 3 {
		e.WSClock.Advance(ws.DefaultHelloTimeout - time.Second)
		hello(retrying, fmt.Sprintf("h%d", i+2))
		settled(retrying, fmt.Sprintf("q%d", i+2))
	}
	// Three deadlines after the first hello, one after the last answer to each.
	require.Equal(t, websocket.StatusCode(4000), silent.ExpectClose())
	down.Store(false)
	require.Equal(t, "snapshot", retrying.Hello("").Type)
	require.Equal(t, "ack", retrying.Chat("r1", "at last").Type, "the connection stays open")
}
