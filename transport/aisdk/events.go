package aisdk

import (
	"context"
	"net/http"
	"time"

	"github.com/chatd/chatd/conversation"
)

// pingEvery is how often a stream or the events feed sends pingLine, a comment line, so
// that proxies and the client see it alive while nothing happens.
const pingEvery = 15 * time.Second

var pingLine = []byte(": ping\n\n")

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
	out, sw, leave, err := h.follow(ctx, cancel, w, r, who, sid, format, enc.catchUp)
	defer leave()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.streams.add(out)
	defer h.streams.remove(out)
	expired, stopExpiry := h.expiry(who, sw)
	defer stopExpiry()
	ping := h.cfg.Clock.NewTicker(pingEvery)
	defer ping.Stop()
	startSSE(w, sw)
	rc := sw.rc
	var spare [][]byte
	for {
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
