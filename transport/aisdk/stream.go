package aisdk

import (
	"bytes"
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// closeGrace bounds how long a stream asked to end may take to.
const closeGrace = 5 * time.Second

// expiredPart ends a stream whose token expired: an error part the SDK puts in useChat's
// error, with chatd's code first, then the stream's end.
var expiredPart = []byte(`data: {"type":"error","errorText":"unauthorized: the token expired; resume the stream with a new one"}` + "\n\n" + done)

// streams are the open streams, so a shutdown can end them: an HTTP server's Shutdown
// waits for its requests, and a stream lasts as long as its run.
type streams struct {
	mu  sync.Mutex
	set map[*transport.Outbox]struct{}
}

func (s *streams) add(o *transport.Outbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = map[*transport.Outbox]struct{}{}
	}
	s.set[o] = struct{}{}
}

func (s *streams) remove(o *transport.Outbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, o)
}

// Shutdown ends every open stream after what it has queued (its clients resume, on
// another node or this one back): register it with the HTTP server's RegisterOnShutdown.
func (h *Handler) Shutdown() {
	h.streams.mu.Lock()
	defer h.streams.mu.Unlock()
	for o := range h.streams.set {
		o.Close(transport.DisconnectShutdown, true)
	}
}

// follow subscribes a new outbox, filled in format (with catchUp for its catch-up), to
// session sid's actor for the caller, writing to w through the returned sseWriter; ctx
// is the response's, cancel ends it. leave, always to be called once the response is
// done, detaches and unsubscribes it. Streams and the events feed follow a session so.
func (h *Handler) follow(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, r *http.Request, who caller, sid uuid.UUID,
	format *conversation.Format, catchUp func(conversation.CatchUp) ([][]byte, error)) (out *transport.Outbox, sw *sseWriter, leave func(), err error) {
	sw = &sseWriter{wake: make(chan struct{}, 1), cut: cancel, rc: http.NewResponseController(w)}
	out = transport.NewOutbox(&transport.OutboxOptions{
		Format:        format,
		EncodeCatchUp: catchUp,
		Budget:        h.cfg.SendQueueBytes,
		CloseGrace:    closeGrace,
		Clock:         h.cfg.Clock,
		Metrics:       h.cfg.Metrics,
		Logger:        h.log,
	}, sw, r.RemoteAddr)
	actor, _, err := h.cfg.Hub.Hello(ctx, sid, conversation.HelloRequest{Owner: who.owner, Subscriber: out, Format: format})
	leave = func() {}
	if actor != nil {
		leave = func() {
			out.Detach()
			uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ucancel()
			actor.Unsubscribe(uctx, out)
		}
	}
	return out, sw, leave, err
}

// expiry returns a channel closed (and sw woken) when the caller's token expires; never
// for a token that does not. stop releases its timer.
func (h *Handler) expiry(who caller, sw *sseWriter) (expired <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	if who.expires.IsZero() {
		return ch, func() {}
	}
	t := h.cfg.Clock.AfterFunc(who.expires.Sub(h.cfg.Clock.Now()), func() {
		close(ch)
		sw.Wake()
	})
	return ch, func() { t.Stop() }
}

// startSSE answers 200 as Server-Sent Events, unbounded by the server's write timeout (a
// client that does not read is cut by its queue's budget, and the token's expiry ends
// the response).
func startSSE(w http.ResponseWriter, sw *sseWriter) {
	transport.Unbounded(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	_ = sw.rc.Flush()
}

// sseWriter is a stream's transport.Writer: the handler's goroutine writes, woken here.
type sseWriter struct {
	wake chan struct{}
	cut  context.CancelFunc
	rc   *http.ResponseController
}

func (s *sseWriter) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Cut ends a stream whose close did not go through in time: a write stuck on a client
// that does not read fails at once.
func (s *sseWriter) Cut() {
	s.cut()
	_ = s.rc.SetWriteDeadline(time.Now())
}

// stream answers with run runID of session sid as a UI message stream: the run from its
// start (a snapshot's worth), then its live events, until it ends. The stream is a
// subscriber of the session's actor like a WebSocket tab, with the same bounded queue: one
// that does not keep up is ended. With resume, a run that is not the session's latest is
// answered 204 (nothing to resume).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, who caller, sid, runID uuid.UUID, resume bool) {
	h.streamWith(w, r, who, sid, runID, streamOptions{resume: resume})
}

// streamOptions: resume answers 204 for a run that is not the session's latest;
// continuation streams only what follows (the client has the run so far), after then
// has run, subscribed already, so nothing it causes is missed; counted: the caller took
// the stream's place among the user's (acquireStream) already.
type streamOptions struct {
	resume       bool
	continuation bool
	counted      bool
	then         func(ctx context.Context) error
	// awaitRequest: runID is uuid.Nil and the stream is the run that the queued message
	// of this requestId starts, when it starts.
	awaitRequest string
}

// acquireStream takes a place among the user's streams (Config.Users), or answers 429
// rate_limited and returns false. release gives it back.
func (h *Handler) acquireStream(w http.ResponseWriter, who caller) (release func(), ok bool) {
	if h.cfg.Users == nil {
		return func() {}, true
	}
	if !h.cfg.Users.Acquire(who.owner) {
		h.cfg.Metrics.RateLimited(transport.LimitUserConns)
		writeError(w, errorf(conversation.CodeRateLimited, "too many connections for this user (at most %d): close a stream or a tab, then try again", h.cfg.Users.Max()))
		return nil, false
	}
	return func() { h.cfg.Users.Release(who.owner) }, true
}

func (h *Handler) streamWith(w http.ResponseWriter, r *http.Request, who caller, sid, runID uuid.UUID, o streamOptions) {
	resume := o.resume
	if !o.counted {
		release, ok := h.acquireStream(w, who)
		if !ok {
			return
		}
		defer release()
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	enc := newEncoder(runID)
	enc.needsApproval, enc.continuation, enc.awaitRequest = h.cfg.NeedsApproval, o.continuation, o.awaitRequest
	// A format of its own: the encoder keeps state per stream.
	format := conversation.NewFormat("aisdk", enc.event)
	out, sw, leave, err := h.follow(ctx, cancel, w, r, who, sid, format, enc.catchUp)
	defer leave()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !enc.found.Load() {
		if resume {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		// The run is not the session's latest any more (a retry of an older message):
		// it will publish nothing, and what it was is in the transcript.
		writeError(w, errorf(conversation.CodeConflict, "run %s is not the chat's latest; GET the transcript for it", runID))
		return
	}
	h.streams.add(out)
	defer h.streams.remove(out)
	if o.then != nil {
		if err := o.then(ctx); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	// A stream lasts as long as its run: the server's write timeout is for answers.
	expired, stopExpiry := h.expiry(who, sw)
	defer stopExpiry()
	// A run can be quiet for long (a call waiting for approval): a comment line now and
	// then keeps proxies from timing the response out and tells ChatdChatTransport the
	// connection is alive (the SDK's parser skips it).
	ping := h.cfg.Clock.NewTicker(pingEvery)
	defer ping.Stop()
	w.Header().Set("x-vercel-ai-ui-message-stream", "v1")
	startSSE(w, sw)
	rc := sw.rc

	var spare [][]byte
	for {
		select {
		case <-expired:
			// As a WebSocket is closed with 4001: the client gets a new token and
			// resumes (GET .../stream), from the run's start.
			_, _ = w.Write(expiredPart)
			_ = rc.Flush()
			return
		default:
		}
		frames, req, ok := out.Take(spare)
		if !ok {
			select {
			case <-sw.wake:
				continue
			case <-ping.Chan():
				if _, err := w.Write(pingLine); err != nil || rc.Flush() != nil {
					return
				}
				continue
			case <-ctx.Done():
				return
			}
		}
		ended := false
		for _, f := range frames {
			if len(f) == 0 {
				continue
			}
			if _, err := w.Write(f); err != nil {
				return
			}
			ended = ended || bytes.HasSuffix(f, []byte(done))
		}
		if err := rc.Flush(); err != nil {
			return
		}
		out.Sent(len(frames))
		spare = frames[:0]
		if ended {
			return
		}
		if req != nil && (!req.Flush || !out.Pending()) {
			// The actor let go of the stream (too slow, shut down, moved, deleted) before
			// the run ended: the response is aborted, not ended, so that the SDK sees a
			// broken stream and never a finished answer; the client resumes
			// (GET .../stream) and gets the run from its start.
			panic(http.ErrAbortHandler)
		}
	}
}
