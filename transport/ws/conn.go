package ws

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"golang.org/x/time/rate"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// conn is one WebSocket connection: its lifecycle. Its goroutine (started by serveHere
// once the upgrade is done: the HTTP handler has returned) reads (reader.go) and never
// waits: a worker goroutine answers the commands while any are queued (worker.go), a
// writer goroutine drains the outbox while it has frames the socket did not take at once
// (writer.go). The outbox is the conversation.Subscriber of the session: the actor queues
// frames on it, or writes them directly while no writer runs (conn.WriteNow), without
// ever blocking.
type conn struct {
	s  *Server
	ws *websocket.Conn
	// batch gathers a batch of frames into one write(2) (nil in tests that build a
	// conn without the server's Accept).
	batch *batchConn
	// req is what is kept of the upgrade request: for the logs and the Authenticator.
	req upgrade
	ctx context.Context
	// stop cancels ctx; cut also closes the socket.
	stop context.CancelFunc
	out  *transport.Outbox

	// A writer goroutine runs only while the outbox has something to write that could
	// not be written directly (WriteNow), a worker only while commands are queued: an
	// idle connection costs one goroutine, the reader.
	writers sync.WaitGroup
	// writeFailed: a direct write failed; the writer woken for it ends the connection.
	writeFailed atomic.Bool
	// plain: no extension was negotiated, so WriteNow frames text itself
	// (batchConn.writeText).
	plain bool

	// Commands (worker.go): queued by the reader, handled by the worker in order. The
	// head is the command being handled.
	cmdMu   sync.Mutex
	cmds    []clientFrame
	working bool
	worker  sync.WaitGroup

	// Pings (ping.go).
	pingMu      sync.Mutex
	pingTimer   clockwork.Timer
	pingStopped bool
	// pongs counts the pongs the reader took in (websocket.AcceptOptions.OnPongReceived):
	// a ping whose timeout fired just as its pong arrived was still answered.
	pongs *atomic.Int64
	pings sync.WaitGroup

	// The hello deadline (hello.go). A hello that arrived in time is never cut off by the
	// deadline while it waits for the worker or is being answered; one that then fails
	// closes the connection, unless the server failed it (storage, internal): then the
	// deadline starts again from its answer. helloMu guards these and helloTimer.
	helloMu       sync.Mutex
	hellosPending int  // hellos queued or being answered
	helloExpired  bool // the deadline passed
	helloGen      int  // counts the deadline's armings: a timer armed before the last one does nothing
	helloStopped  bool // the deadline is over: the connection said hello, or ended
	// helloServerFailed: the hello being answered failed on the server's side (storage,
	// internal). Worker only until helloSettled reads it under helloMu.
	helloServerFailed bool
	helloed           atomic.Bool
	// helloFailure is the code of the last hello that failed without closing the
	// connection, "" for none; commands queued behind it get it too. Worker only.
	helloFailure string
	helloTimer   clockwork.Timer

	// The token's expiry (expiry.go): a warning and a close timer, re-armed by
	// auth.refresh. expiryGen tells a late timer of an earlier token to do nothing.
	expiryMu      sync.Mutex
	expiryWarn    clockwork.Timer
	expiryClose   clockwork.Timer
	expiryGen     int
	expiryStopped bool

	// Owned by the worker; read by serve once the worker is done.
	actor *conversation.Actor
	// user is who the hello's token named. Worker only.
	user string
	// token is the connection's bearer token (the hello's, then each auth.refresh's),
	// sent with its messages for tools and agents that pass it on. Worker only.
	token string
	// userCounted: the connection counts against user's MaxConnsPerUser. Worker only;
	// read by serve once the worker is done.
	userCounted bool

	// host is the remote address the per-address limits count the connection under;
	// cmdLimiter its bucket of commands, nil for no limit. Reader only.
	host       string
	cmdLimiter *rate.Limiter
	// closed is how the client closed the connection (-1: without a close frame), for
	// the relay to pass on. Reader only; read by serve after the reader returns.
	closed       websocket.StatusCode
	closedReason string

	// relay is the link to the node holding the session, once the hello was relayed
	// there (relay.go): the reader forwards every frame to it. Under cmdMu; set once.
	relay *relay
}

var _ transport.Writer = (*conn)(nil)

func newConn(s *Server, ws *websocket.Conn, r *http.Request) *conn {
	ctx, stop := context.WithCancel(context.Background())
	// Its Done channel is made on first use, which would be a command's, in a run: made
	// now, it does not stay behind among the run's garbage when the connection is idle.
	ctx.Done()
	c := &conn{s: s, ws: ws, req: newUpgrade(r), ctx: ctx, stop: stop, pongs: new(atomic.Int64)}
	c.out = transport.NewOutbox(&s.out, c, r.RemoteAddr)
	if s.cfg.CommandRate != rate.Inf {
		c.cmdLimiter = rate.NewLimiter(s.cfg.CommandRate, s.cfg.CommandBurst)
	}
	return c
}

// cut ends the connection at once. Cutting the socket is what unblocks a write: writes
// take no context (see write).
func (c *conn) cut() {
	c.stop()
	_ = c.ws.CloseNow()
}

// Cut is the outbox's: a close request was not carried out within the grace period.
func (c *conn) Cut() { c.cut() }

// logEvent adds the connection's remote address to a log event. (A logger of its own
// would cost every connection half a KiB.)
func (c *conn) logEvent(e *zerolog.Event) *zerolog.Event {
	return e.Str("remote", c.req.remoteAddr)
}

// serve runs the connection until it closes, then lets go of everything it started.
func (c *conn) serve() {
	c.armHelloDeadline()
	c.schedulePing()

	c.readLoop()

	// Cancelling ctx ends the command the worker is on and drops the queued ones.
	c.cut()
	c.stopHelloDeadline()
	c.stopPings()
	c.stopExpiry()
	// Gone: refuse frames from now on instead of queueing them for nobody until the
	// actor hears of the unsubscribe. No writer starts after this.
	c.out.Detach()
	// No worker starts either: only the reader, which has returned, starts one. Once it
	// is done, c.actor is the session a hello subscribed to, if any.
	c.worker.Wait()
	// The worker, which relays a hello, is done: the relay, if any, is set.
	c.cmdMu.Lock()
	r := c.relay
	c.cmdMu.Unlock()
	if r != nil {
		r.close(c.closed, c.closedReason)
	}
	c.writers.Wait()
	if c.userCounted {
		c.s.releaseUser(c.user)
	}
	if c.actor != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.actor.Unsubscribe(ctx, c.out)
		cancel()
	}
}
