package aisdk

import (
	"context"
	"net/http"
	"time"

	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport"
)

// pingEvery is how often an idle events feed sends a comment line, so that proxies and
// the client see it alive.
const pingEvery = 15 * time.Second

// The events feed, GET /v1/aisdk/chat/{id}/events: one SSE line per change of the chat
// that a page showing it must follow (a run that another tab or device started, a run's
// end, the active branch), so that a client can resume the run's stream or reload the
// transcript. It carries no text: that is the run's own stream. It is a subscriber of
// the session's actor, like a stream, and ends (aborted) when the actor lets go of it.

// feedEncoder turns a session's events into the feed's lines.
type feedEncoder struct{}

func feedLine(v map[string]any) []byte {
	var c chunks
	c.add(v)
	return c.bytes()
}

func (feedEncoder) event(ev *conversation.Event) []byte {
	switch ev.Type {
	case conversation.EventChatStarted:
		return feedLine(map[string]any{"type": "run-started", "runId": ev.RunID})
	case conversation.EventChatDone, conversation.EventChatError, conversation.EventChatCancelled:
		status := ""
		if ev.Run != nil {
			status = string(ev.Run.Status)
		}
		return feedLine(map[string]any{"type": "run-ended", "runId": ev.RunID, "status": status})
	case conversation.EventBranch:
		return feedLine(map[string]any{"type": "branch-changed"})
	}
	return nil
}

func (feedEncoder) catchUp(cu conversation.CatchUp) ([][]byte, error) {
	var active any // null: no run is active
	if s := cu.Snapshot; s != nil && s.ActiveRun != nil {
		active = s.ActiveRun.ID
	}
	return [][]byte{feedLine(map[string]any{"type": "state", "activeRunId": active})}, nil
}

// events is GET /v1/aisdk/chat/{id}/events.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, who caller) {
	sid, ok, err := h.session(r.Context(), who.owner, r.PathValue("id"), false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, errorf(conversation.CodeNotFound, "no such chat"))
		return
	}
	release, ok := h.acquireStream(w, who)
	if !ok {
		return
	}
	defer release()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var enc feedEncoder
	format := conversation.NewFormat("aisdk-events", enc.event)
	sw := &sseWriter{wake: make(chan struct{}, 1), cut: cancel, rc: http.NewResponseController(w)}
	out := transport.NewOutbox(&transport.OutboxOptions{
		Format:        format,
		EncodeCatchUp: enc.catchUp,
		Budget:        h.cfg.SendQueueBytes,
		CloseGrace:    closeGrace,
		Clock:         h.cfg.Clock,
		Metrics:       h.cfg.Metrics,
		Logger:        h.log,
	}, sw, r.RemoteAddr)
	actor, _, err := h.cfg.Hub.Hello(ctx, sid, conversation.HelloRequest{Owner: who.owner, Subscriber: out, Format: format})
	if actor != nil {
		defer func() {
			out.Detach()
			uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ucancel()
			actor.Unsubscribe(uctx, out)
		}()
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.streams.add(out)
	defer h.streams.remove(out)
	transport.Unbounded(w)
	expired := make(chan struct{})
	if !who.expires.IsZero() {
		t := h.cfg.Clock.AfterFunc(who.expires.Sub(h.cfg.Clock.Now()), func() {
			close(expired)
			sw.Wake()
		})
		defer t.Stop()
	}
	ping := h.cfg.Clock.NewTicker(pingEvery)
	defer ping.Stop()
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := sw.rc
	_ = rc.Flush()
	var spare [][]byte
	for {
		frames, req, ok := out.Take(spare)
		if !ok {
			select {
			case <-sw.wake:
				continue
			case <-ping.Chan():
				if _, err := w.Write([]byte(": ping\n\n")); err != nil || rc.Flush() != nil {
					return
				}
				continue
			case <-expired:
				_, _ = w.Write(feedLine(map[string]any{"type": "error", "errorText": "unauthorized: the token expired; open the feed again with a new one"}))
				_ = rc.Flush()
				return
			case <-ctx.Done():
				return
			}
		}
		for _, f := range frames {
			if len(f) == 0 {
				continue
			}
			if _, err := w.Write(f); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		out.Sent(len(frames))
		spare = frames[:0]
		if req != nil && (!req.Flush || !out.Pending()) {
			// The actor let go of the feed (shut down, moved, deleted, too slow): aborted,
			// so that the client opens it again (on another node, or this one back).
			panic(http.ErrAbortHandler)
		}
	}
}
