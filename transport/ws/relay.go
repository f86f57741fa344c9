package ws

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"

	"github.com/chatd/chatd/transport"
)

// Relaying (docs/protocol.md, "Several nodes"): any node takes any connection. A hello
// for a session another live node holds is relayed there: this node dials the holder's
// WebSocket, sends it the hello as it came (the holder authenticates its token again),
// and copies frames both ways, unmodified, until either side closes. The client keeps
// this node's limits (command rate, read limit) and pings; the holder runs the session.

const (
	// relayDialTimeout bounds dialling the holder and sending it the hello.
	relayDialTimeout = 5 * time.Second
	// relayCloseTimeout bounds the close handshake with the holder.
	relayCloseTimeout = 5 * time.Second
	// relayQueueFrames bounds the client's frames waiting to be written to the holder,
	// which reads without waiting: past it the client is closed as slow (4008).
	relayQueueFrames = 256
)

// disconnectHolderGone tells a relayed client that the holder went away (shut down, or
// the link to it broke): its session is another node's now, or soon none's.
var disconnectHolderGone = transport.Disconnect{Code: transport.DisconnectMoved.Code, Reason: "the session's node went away; reconnect"}

// relayFrame is a client frame on its way to the holder.
type relayFrame struct {
	typ  websocket.MessageType
	data []byte
}

// relay is a connection's link to the node holding its session. Two goroutines: the
// pump reads the holder and queues what it says in the connection's outbox (a reply
// under its budget: a client that does not read is closed as slow, the holder never
// waits on it), the sender writes the client's frames to the holder in order.
type relay struct {
	c    *conn
	up   *websocket.Conn
	addr string
	ctx  context.Context
	stop context.CancelFunc

	mu       sync.Mutex
	queue    []relayFrame
	stopping bool
	wake     chan struct{}

	done sync.WaitGroup
}

// startRelay relays the connection to the node at addr, with f (a hello) as its first
// frame, and the commands queued behind it next. It reports false when the node could
// not be reached: the hello is then the caller's to answer.
func (c *conn) startRelay(f clientFrame, addr string) bool {
	rl := c.s.cfg.Relay
	ctx, cancel := context.WithTimeout(c.ctx, relayDialTimeout)
	defer cancel()
	up, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{
		HTTPClient:   rl.HTTPClient(),
		HTTPHeader:   rl.Header(),
		Subprotocols: []string{Subprotocol},
	})
	if err != nil {
		c.logEvent(c.s.log.Info()).Err(err).Str("node_addr", addr).Msg("could not relay a hello to the session's node")
		return false
	}
	// The holder's frames are its own: a snapshot may be larger than a client's.
	up.SetReadLimit(-1)
	if err := up.Write(ctx, websocket.MessageText, f.raw); err != nil {
		_ = up.CloseNow()
		c.logEvent(c.s.log.Info()).Err(err).Str("node_addr", addr).Msg("could not relay a hello to the session's node")
		return false
	}
	rctx, stop := context.WithCancel(context.Background())
	r := &relay{c: c, up: up, addr: addr, ctx: rctx, stop: stop, wake: make(chan struct{}, 1)}
	// From here the reader sends every frame to the relay (queue); those it queued
	// behind the hello go first, in order.
	c.cmdMu.Lock()
	for _, q := range c.cmds[1:] {
		r.queue = append(r.queue, relayFrame{typ: websocket.MessageText, data: q.raw})
	}
	clear(c.cmds[1:])
	c.cmds = c.cmds[:1]
	c.relay = r
	c.cmdMu.Unlock()
	c.s.cfg.Relay.Metrics.RelayOpened(transport.RelayViaHello)
	r.done.Add(2)
	go r.pump()
	go r.send()
	r.signal()
	return true
}

// forward queues a client frame for the holder, never waiting.
func (r *relay) forward(typ websocket.MessageType, data []byte) {
	r.mu.Lock()
	if r.stopping {
		r.mu.Unlock()
		return
	}
	if len(r.queue) >= relayQueueFrames {
		r.mu.Unlock()
		r.c.out.Close(transport.DisconnectSlow, false)
		return
	}
	r.queue = append(r.queue, relayFrame{typ: typ, data: data})
	r.mu.Unlock()
	r.signal()
}

func (r *relay) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// send writes the client's frames to the holder in order until the relay stops.
func (r *relay) send() {
	defer r.done.Done()
	var batch []relayFrame
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-r.wake:
		}
		r.mu.Lock()
		batch, r.queue = r.queue, batch[:0]
		r.mu.Unlock()
		for i, f := range batch {
			// As the connection's own writes: a context that is never done; a write
			// stuck on a holder that does not read ends when the relay is cut.
			if err := r.up.Write(context.Background(), f.typ, f.data); err != nil {
				return // the pump sees the link end too
			}
			batch[i] = relayFrame{}
		}
	}
}

// pump queues the holder's frames to the client until the holder closes, then closes
// the client the same way: with the holder's code and reason, except that a holder
// going away (1001: it shuts down; or the link broke) is the session moving (4010), for
// this node is not going away, and the client reconnects at once.
func (r *relay) pump() {
	defer r.done.Done()
	for {
		_, data, err := r.up.Read(r.ctx)
		if err != nil {
			r.holderClosed(err)
			return
		}
		if !r.c.out.Reply(data) {
			return // closing (as slow, if this did not fit)
		}
	}
}

func (r *relay) holderClosed(err error) {
	r.mu.Lock()
	stopping := r.stopping
	r.mu.Unlock()
	if stopping {
		return
	}
	var ce websocket.CloseError
	d := disconnectHolderGone
	if errors.As(err, &ce) {
		switch ce.Code {
		case websocket.StatusGoingAway, websocket.StatusAbnormalClosure, websocket.StatusTLSHandshake:
		case websocket.StatusNoStatusRcvd:
			d = transport.DisconnectNormal
		default:
			d = transport.Disconnect{Code: int(ce.Code), Reason: ce.Reason}
		}
	} else {
		r.c.logEvent(r.c.s.log.Info()).Err(err).Str("node_addr", r.addr).Msg("the link to the session's node broke")
	}
	r.c.out.Close(d, true)
}

// close ends the relay: the holder gets the client's close code (1001 when the client
// left without one), then the relay's goroutines are waited for.
func (r *relay) close(code websocket.StatusCode, reason string) {
	r.mu.Lock()
	r.stopping = true
	r.queue = nil
	r.mu.Unlock()
	switch code {
	case -1, websocket.StatusAbnormalClosure, websocket.StatusTLSHandshake:
		code, reason = websocket.StatusGoingAway, "the client went away"
	case websocket.StatusNoStatusRcvd:
		code = websocket.StatusNormalClosure
	}
	done := make(chan struct{})
	go func() {
		_ = r.up.Close(code, reason)
		close(done)
	}()
	t := time.NewTimer(relayCloseTimeout)
	select {
	case <-done:
	case <-t.C:
	}
	t.Stop()
	r.stop()
	_ = r.up.CloseNow()
	<-done
	r.done.Wait()
	r.c.s.cfg.Relay.Metrics.RelayClosed()
}

// relayTarget returns the node to proxy an upgrade to: the holder of the session its
// ?session= names, when another live node holds it. A missing or bad id is served here
// (the hello decides).
func (s *Server) relayTarget(r *http.Request) (string, bool) {
	if s.cfg.Relay == nil {
		return "", false
	}
	v := r.URL.Query().Get("session")
	if v == "" {
		return "", false
	}
	id, err := uuid.Parse(v)
	if err != nil || id == uuid.Nil {
		return "", false
	}
	return s.cfg.Relay.Owner(r, id)
}

// proxyUpgrade proxies the whole upgrade to the node at addr (the session's holder): its
// bytes are copied both ways until either side ends, so its limits, pings and close codes
// are the holder's. When the holder cannot be reached the connection is served here.
func (s *Server) proxyUpgrade(w http.ResponseWriter, r *http.Request, addr, host string) {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		http.Error(w, "server shutting down", http.StatusServiceUnavailable)
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()
	// Shutdown cuts proxied connections: their bytes are not frames this node can close.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.proxies, cancel)()
	opened := false
	s.cfg.Relay.Proxy(w, r.WithContext(ctx), addr, func(resp *http.Response) {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			opened = true
			s.cfg.Relay.Metrics.RelayOpened(transport.RelayViaUpgrade)
		}
	}, func(w http.ResponseWriter, r *http.Request) {
		s.serveHere(w, r, host)
	})
	if opened {
		s.cfg.Relay.Metrics.RelayClosed()
	}
}
