package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
)

// Close codes of the protocol beyond the standard ones.
const (
	closeProtocol     websocket.StatusCode = 4000
	closeUnauthorized websocket.StatusCode = 4001
	closeNotFound     websocket.StatusCode = 4004
	closeSlow         websocket.StatusCode = 4008
)

// conn is one WebSocket connection. The handler goroutine reads and answers commands; one
// writer goroutine drains the outbound queue. conn is the conversation.Subscriber of its
// session: the actor queues frames with Deliver, which never blocks.
type conn struct {
	s      *Server
	ws     *websocket.Conn
	req    *http.Request
	ctx    context.Context
	cancel context.CancelFunc

	// Outbound queue: one FIFO, two budgets. Live events and replies each may queue up
	// to SendQueueBytes that the writer has not taken yet; catch-up frames (bounded by
	// the actor) count against neither. While the writer writes a batch the next one
	// fills, so a slow connection holds at most about twice the budget.
	mu         sync.Mutex
	frames     [][]byte
	eventBytes int
	replyBytes int
	closeReq   *closeRequest // set once; no frame is queued after it
	closeTimer clockwork.Timer
	// A writer goroutine runs only while there is something to write: an idle
	// connection costs one goroutine (the reader), not two.
	writing bool
	writers sync.WaitGroup

	// Pings.
	pingMu      sync.Mutex
	pingTimer   clockwork.Timer
	pingStopped bool
	pings       sync.WaitGroup

	// The hello deadline. A hello that arrived in time is never cut off by the deadline
	// while it is being answered; one that then fails closes the connection.
	helloMu      sync.Mutex
	helloBusy    bool // a hello is being answered
	helloExpired bool // the deadline passed
	helloed      atomic.Bool
	helloTimer   clockwork.Timer

	// Owned by the reading goroutine.
	actor *conversation.Actor
}

type closeRequest struct {
	code   websocket.StatusCode
	reason string
	flush  bool // send what is queued first
}

var _ conversation.Subscriber = (*conn)(nil)

func newConn(s *Server, ws *websocket.Conn, r *http.Request) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	return &conn{
		s:   s,
		ws:  ws,
		req: r,
		ctx: ctx,
		// Cutting the socket is what unblocks a write: writes take no context (see write).
		cancel: func() { cancel(); _ = ws.CloseNow() },
	}
}

// logEvent adds the connection's remote address to a log event. (A logger of its own
// would cost every connection half a KiB.)
func (c *conn) logEvent(e *zerolog.Event) *zerolog.Event {
	return e.Str("remote", c.req.RemoteAddr)
}

// Deliver queues a live event. One that would take the events waiting for the writer
// over the budget is refused (the actor then drops this connection with 4008), unless
// none are waiting: a single event larger than the budget still gets through.
func (c *conn) Deliver(ev *conversation.Event) bool {
	return c.enqueue(ev.Encode(Format), &c.eventBytes)
}

// CatchUp queues the answer to a hello, outside both budgets.
func (c *conn) CatchUp(cu conversation.CatchUp) bool {
	frames, err := EncodeCatchUp(cu)
	if err != nil {
		c.logEvent(c.s.log.Error()).Err(err).Msg("encode a catch-up")
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeReq != nil {
		return false
	}
	c.frames = append(c.frames, frames...)
	c.signal()
	return true
}

func (c *conn) enqueue(frame []byte, budget *int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeReq != nil {
		return false
	}
	if *budget > 0 && *budget+len(frame) > c.s.cfg.SendQueueBytes {
		return false
	}
	c.frames = append(c.frames, frame)
	*budget += len(frame)
	c.signal()
	return true
}

// Dropped is called by the actor when it lets go of this connection.
func (c *conn) Dropped(reason conversation.DropReason) {
	switch reason {
	case conversation.DropSlow:
		if c.requestClose(closeSlow, "too slow: outbound queue full", false) {
			c.logEvent(c.s.log.Info()).Int("queue_bytes", c.s.cfg.SendQueueBytes).Msg("closing a connection whose send queue overflowed (4008)")
		}
	default:
		c.requestClose(websocket.StatusGoingAway, "server shutting down", true)
	}
}

// requestClose asks the writer to close the connection, after the queued frames when
// flush is set. The first request wins; it reports whether this one did. If the peer does
// not let the writer finish within the grace period, the connection is cut.
func (c *conn) requestClose(code websocket.StatusCode, reason string, flush bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closeReq != nil {
		return false
	}
	c.closeReq = &closeRequest{code: code, reason: reason, flush: flush}
	if code == closeSlow {
		// Counted before the writer can send the close, so whoever sees it sees the count.
		c.s.cfg.Metrics.slowDrops.Inc()
	}
	if !flush {
		c.frames = nil
	}
	c.closeTimer = c.s.clock.AfterFunc(c.s.cfg.CloseGrace, c.cancel)
	c.signal()
	return true
}

func (c *conn) closing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeReq != nil
}

// idleQueueCap is the most queue capacity an idle connection keeps.
const idleQueueCap = 64

// signal makes sure a writer runs to send what was queued. c.mu must be held.
func (c *conn) signal() {
	if c.writing {
		return
	}
	c.writing = true
	c.writers.Add(1)
	go c.writeLoop()
}

// take returns the queued frames (reusing spare's storage for the next ones) and the
// close request, if any. The frames taken no longer count against the budgets. When
// there is nothing to do it returns ok false, and the writer must exit: the next frame
// or close request starts another.
func (c *conn) take(spare [][]byte) (frames [][]byte, req *closeRequest, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	frames, req = c.frames, c.closeReq
	if len(frames) == 0 && req == nil {
		c.writing = false
		if cap(frames) > idleQueueCap {
			c.frames = nil // a catch-up's large batch is not kept by an idle connection
		}
		return nil, nil, false
	}
	c.frames = spare[:0]
	c.eventBytes, c.replyBytes = 0, 0
	return frames, req, true
}

// dropping reports whether the connection is being closed without sending what is left.
func (c *conn) dropping() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeReq != nil && !c.closeReq.flush
}

// writeLoop writes queued frames until the queue is empty, then exits, or until the
// connection closes. Only one runs at a time (see signal).
func (c *conn) writeLoop() {
	defer c.writers.Done()
	var spare [][]byte
	for {
		if c.ctx.Err() != nil {
			return // writing stays set: the connection is done, no writer starts again
		}
		frames, req, ok := c.take(spare)
		if !ok {
			return
		}
		sent, err := c.write(frames)
		if sent > 0 {
			c.s.cfg.Metrics.framesSent.Add(float64(sent)) // once per batch, not per frame
		}
		if err != nil {
			c.cancel()
			return
		}
		spare = frames[:0]
		if req == nil {
			continue // take sees a close request that came meanwhile
		}
		if req.flush {
			c.mu.Lock()
			pending := len(c.frames) > 0
			c.mu.Unlock()
			if pending {
				continue // send what was queued before the close first
			}
		}
		err = c.ws.Close(req.code, req.reason)
		if err != nil && !errors.Is(err, context.Canceled) {
			c.logEvent(c.s.log.Debug()).Err(err).Int("code", int(req.code)).Msg("close handshake")
		}
		c.cancel()
		return
	}
}

// write writes frames in order and returns how many it wrote. It stops early when the
// connection is dropped as slow: what is left is thrown away.
//
// Writes get a context that is never done: with a cancellable one, coder/websocket
// registers and removes a context.AfterFunc around every frame, 5% of chatd's CPU when
// fanning out. A write stuck on a peer that does not read ends when cancel cuts the
// socket (the close grace period, a failed ping, shutdown).
func (c *conn) write(frames [][]byte) (int, error) {
	for i, f := range frames {
		if err := c.ws.Write(context.Background(), websocket.MessageText, f); err != nil {
			return i, err
		}
		frames[i] = nil
		if c.dropping() {
			return i + 1, nil
		}
	}
	return len(frames), nil
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	c.helloTimer = c.s.clock.AfterFunc(c.s.cfg.HelloTimeout, func() {
		c.helloMu.Lock()
		defer c.helloMu.Unlock()
		c.helloExpired = true
		if !c.helloBusy && !c.helloed.Load() {
			c.requestClose(closeProtocol, "no hello within the deadline", true)
		}
	})
	c.schedulePing()

	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			c.logReadError(err)
			break
		}
		if c.closing() {
			continue // keep reading so the close handshake can finish
		}
		c.handle(typ, data)
	}

	c.cancel()
	c.helloTimer.Stop()
	c.stopPings()
	c.mu.Lock()
	if c.closeTimer != nil {
		c.closeTimer.Stop()
	}
	// Gone: refuse frames from now on instead of queueing them for nobody until the
	// actor hears of the unsubscribe. No writer starts after this.
	if c.closeReq == nil {
		c.closeReq = &closeRequest{code: websocket.StatusNormalClosure}
	}
	c.writing = true
	c.frames = nil
	c.mu.Unlock()
	c.writers.Wait()
	if c.actor != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.actor.Unsubscribe(ctx, c)
		cancel()
	}
}

func (c *conn) logReadError(err error) {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return
	case websocket.StatusMessageTooBig:
		c.logEvent(c.s.log.Info()).Msg("closed a connection that sent a frame over the read limit")
		return
	}
	if c.ctx.Err() != nil {
		return
	}
	c.logEvent(c.s.log.Debug()).Err(err).Msg("connection ended")
}

// schedulePing arms the next ping. Pings run from a timer, not a goroutine of their own,
// so an idle connection costs two goroutines: the reader and the writer.
func (c *conn) schedulePing() {
	c.pingMu.Lock()
	defer c.pingMu.Unlock()
	if c.pingStopped {
		return
	}
	c.pingTimer = c.s.clock.AfterFunc(c.s.cfg.PingInterval, c.ping)
}

func (c *conn) ping() {
	c.pingMu.Lock()
	if c.pingStopped {
		c.pingMu.Unlock()
		return
	}
	c.pings.Add(1)
	c.pingMu.Unlock()
	defer c.pings.Done()

	ctx, cancel := context.WithCancel(c.ctx)
	timeout := c.s.clock.AfterFunc(c.s.cfg.PingTimeout, cancel)
	err := c.ws.Ping(ctx)
	timeout.Stop()
	cancel()
	if err != nil {
		if c.ctx.Err() == nil {
			c.logEvent(c.s.log.Info()).Msg("closing a connection that did not answer a ping")
			c.cancel()
		}
		return
	}
	c.schedulePing()
}

func (c *conn) stopPings() {
	c.pingMu.Lock()
	c.pingStopped = true
	if c.pingTimer != nil {
		c.pingTimer.Stop()
	}
	c.pingMu.Unlock()
	c.pings.Wait()
}

// reply queues a reply frame. Replies have their own budget, so a large history page
// cannot get live events refused; a client that sends commands but does not read the
// replies is closed with 4008 once they fill it.
func (c *conn) reply(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.logEvent(c.s.log.Error()).Err(err).Msg("encode reply")
		return
	}
	if !c.enqueue(b, &c.replyBytes) && c.requestClose(closeSlow, "too slow: outbound queue full", false) {
		c.logEvent(c.s.log.Info()).Int("queue_bytes", c.s.cfg.SendQueueBytes).Msg("closing a connection that does not read its replies (4008)")
	}
}

func (c *conn) replyError(requestID *string, code, message string) {
	c.reply(wireErrorReply{Type: "error", RequestID: requestID, Code: code, Message: message})
}

// replyErr answers a failed command with the error's code.
func (c *conn) replyErr(requestID *string, err error) {
	var ce *conversation.Error
	switch {
	case errors.As(err, &ce):
		c.replyError(requestID, ce.Code, ce.Message)
	case errors.Is(err, conversation.ErrStopped), errors.Is(err, hub.ErrClosed):
		c.replyError(requestID, conversation.CodeInternal, "the server is shutting down; reconnect")
		c.requestClose(websocket.StatusGoingAway, "server shutting down", true)
	case c.ctx.Err() != nil:
		// The connection is closing; nobody is listening for the answer.
	default:
		c.logEvent(c.s.log.Error()).Err(err).Msg("command failed")
		c.replyError(requestID, conversation.CodeInternal, "internal error")
	}
}

// violation answers a frame that breaks the protocol and closes with 4000.
func (c *conn) violation(requestID *string, message string) {
	c.replyError(requestID, conversation.CodeBadRequest, message)
	c.requestClose(closeProtocol, message, true)
}

func (c *conn) handle(typ websocket.MessageType, data []byte) {
	if typ != websocket.MessageText {
		c.replyError(nil, conversation.CodeBadRequest, "frames must be JSON in text frames")
		return
	}
	var f clientFrame
	err := json.Unmarshal(data, &f)
	validID := f.RequestID != nil && chat.ValidRequestID(*f.RequestID)
	if f.RequestID != nil && !validID {
		c.replyError(nil, conversation.CodeBadRequest, fmt.Sprintf("requestId must be 1 to %d characters", chat.MaxRequestIDLen))
		return
	}
	if err != nil {
		// A field of the wrong type leaves the others decoded: echo a valid requestId
		// so the client can match the error to its request.
		var echo *string
		if validID {
			echo = f.RequestID
		}
		c.replyError(echo, conversation.CodeBadRequest, "malformed frame: "+jsonProblem(err))
		return
	}
	switch f.Type {
	case "":
		c.replyError(f.RequestID, conversation.CodeBadRequest, "type is required")
	case typeHello:
		if c.helloed.Load() {
			c.violation(f.RequestID, "hello was already sent on this connection")
			return
		}
		c.hello(f)
	case typeChatSend, typeChatCancel, typeToolDecide, typeChatResume, typeHistoryFetch:
		if !c.helloed.Load() {
			c.violation(f.RequestID, "send hello first")
			return
		}
		c.command(f)
	default:
		t := f.Type
		if len(t) > 64 {
			t = t[:64] + "…"
		}
		c.replyError(f.RequestID, codeUnknownType, fmt.Sprintf("unknown frame type %q", t))
	}
}

func (c *conn) hello(f clientFrame) {
	c.helloMu.Lock()
	c.helloBusy = true
	c.helloMu.Unlock()
	defer func() {
		c.helloMu.Lock()
		defer c.helloMu.Unlock()
		c.helloBusy = false
		if c.helloExpired && !c.helloed.Load() {
			c.requestClose(closeProtocol, "no hello within the deadline", true)
		}
	}()

	owner, err := c.s.cfg.Auth.Authenticate(c.ctx, c.req, f.Token)
	if err != nil {
		c.replyError(f.RequestID, conversation.CodeUnauthorized, "unauthorized")
		c.requestClose(closeUnauthorized, "unauthorized", true)
		return
	}
	id := uuid.Nil
	if f.SessionID != nil {
		id, err = uuid.Parse(*f.SessionID)
		if err != nil || id == uuid.Nil {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "sessionId must be a UUID")
			return
		}
	} else {
		id = uuid.Must(uuid.NewV7())
	}
	var lastSeq int64
	if f.LastSeq != nil {
		if *f.LastSeq < 0 {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "lastSeq must not be negative")
			return
		}
		lastSeq = *f.LastSeq
	}
	actor, res, err := c.s.cfg.Hub.Hello(c.ctx, id, conversation.HelloRequest{
		Owner:      owner,
		Epoch:      f.Epoch,
		LastSeq:    lastSeq,
		Subscriber: c,
		RequestID:  deref(f.RequestID),
	})
	if err != nil && actor != nil {
		// A hello whose ctx ended may have subscribed all the same; make sure it did not.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		actor.Unsubscribe(ctx, c)
		cancel()
	}
	if errors.Is(err, conversation.ErrNotYours) {
		c.replyError(f.RequestID, conversation.CodeNotFound, "session not found")
		c.requestClose(closeNotFound, "session not found", true)
		return
	}
	if err != nil {
		c.replyErr(f.RequestID, err)
		return
	}
	c.actor = actor
	c.helloed.Store(true)
	c.helloTimer.Stop()
	c.logEvent(c.s.log.Debug()).Str("session_id", id.String()).Bool("resumed", res.Resumed).Int("replayed", res.Replayed).Int64("last_seq", res.LastSeq).Msg("hello")
}

func (c *conn) command(f clientFrame) {
	switch f.Type {
	case typeChatSend:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.send needs a requestId")
			return
		}
		if f.Content == nil {
			c.replyError(f.RequestID, conversation.CodeBadRequest, "chat.send needs content")
			return
		}
		res, err := c.actor.Send(c.ctx, conversation.SendRequest{RequestID: *f.RequestID, Content: *f.Content})
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Duplicate: res.Duplicate, Status: string(res.Status)})

	case typeChatCancel:
		runID, ok := c.runID(f)
		if !ok {
			return
		}
		res, err := c.actor.Cancel(c.ctx, runID)
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Status: string(res.Status)})

	case typeHistoryFetch:
		var before int64
		if f.Before != nil {
			if *f.Before < 1 {
				c.replyError(f.RequestID, conversation.CodeBadRequest, "before must be a message position (1 or more)")
				return
			}
			before = *f.Before
		}
		limit := defaultHistoryLimit
		if f.Limit != nil {
			limit = *f.Limit
		}
		page, err := c.actor.History(c.ctx, before, limit)
		if err != nil {
			c.replyErr(f.RequestID, err)
			return
		}
		c.reply(wireHistory{Type: "history", RequestID: f.RequestID, Messages: toWireMessages(page.Messages), HasMore: page.HasMore})

	case typeToolDecide:
		switch {
		case f.ToolCallID == "":
			c.replyError(f.RequestID, conversation.CodeBadRequest, "tool.decide needs a toolCallId")
		case f.Decision != "approve" && f.Decision != "deny":
			c.replyError(f.RequestID, conversation.CodeBadRequest, `decision must be "approve" or "deny"`)
		default:
			runID, ok := c.runID(f)
			if !ok {
				return
			}
			res, err := c.actor.Decide(c.ctx, runID, f.ToolCallID, f.Decision == "approve")
			if err != nil {
				c.replyErr(f.RequestID, err)
				return
			}
			c.reply(wireAck{Type: "ack", RequestID: f.RequestID, RunID: &res.RunID, Status: string(res.Status)})
		}

	case typeChatResume:
		if f.RequestID == nil {
			c.replyError(nil, conversation.CodeBadRequest, "chat.resume needs a requestId")
			return
		}
		c.replyError(f.RequestID, conversation.CodeBadRequest, "chat.resume is not supported by this server yet")
	}
}

// runID reads a frame's optional runId: uuid.Nil when it is absent. A malformed one is
// answered with an error and ok is false.
func (c *conn) runID(f clientFrame) (id uuid.UUID, ok bool) {
	if f.RunID == nil {
		return uuid.Nil, true
	}
	id, err := uuid.Parse(*f.RunID)
	if err != nil {
		c.replyError(f.RequestID, conversation.CodeBadRequest, "runId must be a UUID")
		return uuid.Nil, false
	}
	return id, true
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// jsonProblem describes a decoding error without echoing the whole frame back.
func jsonProblem(err error) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte %d", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "a frame must be a JSON object"
		}
		return fmt.Sprintf("field %s must be a %s", typ.Field, typ.Type.Kind())
	}
	return "invalid JSON"
}
