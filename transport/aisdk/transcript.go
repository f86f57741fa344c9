package aisdk

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
)

// maxTranscript bounds the messages GET /v1/aisdk/chat/{id} reads.
const maxTranscript = 10000

// transcript is GET /v1/aisdk/chat/{id}: the stored conversation as useChat's
// UIMessage[], to seed its messages on load. A user message keeps the id useChat gave it
// (its run's requestId); each run's answer is one assistant message whose id is the run's.
// A run's open segment shows what is stored of it; resume (GET .../stream) streams the
// rest. It is the active path, or with ?through=<chatd message id> the branch through that
// message (as POST .../branch would show it), which stays as it was. activeRunId names
// the run still going (null: none): a client that resumes it gets its message from the
// start, so it need not show the partial one meanwhile (loadChatdChat leaves it out).
func (h *Handler) transcript(w http.ResponseWriter, r *http.Request, who caller) {
	var through *uuid.UUID
	if q := r.URL.Query(); q.Has("through") {
		id, err := messageParam("through", q.Get("through"))
		if err != nil {
			writeError(w, err)
			return
		}
		through = &id
	}
	sid, ok, err := h.session(r.Context(), who.owner, r.PathValue("id"), false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		if through != nil {
			writeError(w, errorf(conversation.CodeNotFound, "no such chat"))
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"messages": []any{}, "activeRunId": nil})
		return
	}
	h.flush(r.Context(), sid)
	var leaf *uuid.UUID
	if through != nil {
		id, err := h.cfg.Store.MessageNewestBelow(r.Context(), sid, *through)
		if errors.Is(err, store.ErrNotFound) {
			writeError(w, errorf(conversation.CodeNotFound, "message %s is not a message of this chat", *through))
			return
		}
		if err != nil {
			writeError(w, conversation.StoreError("read the branch", err))
			return
		}
		leaf = &id
	}
	msgs, _, err := h.cfg.Store.MessagesPath(r.Context(), sid, leaf, 0, maxTranscript)
	if err != nil {
		writeError(w, conversation.StoreError("read the chat", err))
		return
	}
	var active any // null: no run is active
	if latest, err := h.cfg.Store.RunLatest(r.Context(), sid); err == nil && latest.Status.Active() {
		active = latest.ID
	}
	ui := UIMessages(msgs, h.cfg.NeedsApproval)
	out := map[string]any{"messages": ui, "activeRunId": active}
	if r.URL.Query().Get("tree") == "1" {
		tree, err := h.tree(r.Context(), sid, msgs, ui)
		if err != nil {
			writeError(w, err)
			return
		}
		out["tree"] = tree
	}
	writeJSON(w, http.StatusOK, out)
}

// maxLeaves bounds the branches ?tree=1 reads: the newest ones, and the one shown.
const maxLeaves = 100

// tree is the chat's branches as one tree of UIMessages (?tree=1), in the shape of
// assistant-ui's MessageFormatRepository: {headId, messages: [{parentId, message}]}, a
// message's parent the UIMessage before it on its branch, parents before children and
// alternatives oldest first (the order of chatd's branch metadata); headId is the shown
// branch's last message. shown is that branch, as the transcript read it, and shownUI
// its UIMessages.
func (h *Handler) tree(ctx context.Context, sid uuid.UUID, shown []chat.Message, shownUI []map[string]any) (map[string]any, error) {
	leaves, err := h.cfg.Store.MessageLeaves(ctx, sid, maxLeaves)
	if err != nil {
		return nil, conversation.StoreError("read the branches", err)
	}
	type item struct {
		pos    int64
		parent any
		msg    map[string]any
	}
	byID := map[string]*item{}
	var order []*item
	add := func(path []chat.Message) {
		ui := UIMessages(path, h.cfg.NeedsApproval)
		first := firstPositions(path)
		var parent any // nil: a first message
		for _, m := range ui {
			id := m["id"].(string)
			if byID[id] == nil {
				it := &item{pos: first[id], parent: parent, msg: m}
				byID[id] = it
				order = append(order, it)
			}
			parent = id
		}
	}
	add(shown)
	var head any
	if len(shownUI) > 0 {
		head = shownUI[len(shownUI)-1]["id"]
	}
	for _, leaf := range leaves {
		path, _, err := h.cfg.Store.MessagesPath(ctx, sid, &leaf, 0, maxTranscript)
		if err != nil {
			return nil, conversation.StoreError("read a branch", err)
		}
		add(path)
	}
	// Positions grow down every branch, so sorting by them keeps parents first and puts
	// alternatives in the order they were written.
	sort.SliceStable(order, func(i, j int) bool { return order[i].pos < order[j].pos })
	items := make([]map[string]any, len(order))
	for i, it := range order {
		items[i] = map[string]any{"parentId": it.parent, "message": it.msg}
	}
	return map[string]any{"headId": head, "messages": items}, nil
}

// firstPositions maps the UIMessage ids of path (as UIMessages names them: a user
// message's uiID, an answer's run id) to the position of their first stored message.
func firstPositions(path []chat.Message) map[string]int64 {
	first := map[string]int64{}
	for _, m := range path {
		var id string
		switch {
		case m.Role == chat.RoleUser:
			id = uiID(m)
		case m.RunID != nil:
			id = m.RunID.String()
		default:
			continue
		}
		if _, ok := first[id]; !ok {
			first[id] = m.Position
		}
	}
	return first
}

// UIMessages turns stored messages into the AI SDK's UIMessages: user text messages as
// they are, each run's assistant and tool messages as one assistant message. Notices are
// left out. msgs are a branch (the active path): other branches are not in them.
// needsApproval (nil: none) names the tools whose calls waited for a person: a call of
// one that ran shows as approved. A message at a branch point has metadata.chatd.branch
// (branchMeta): a user message its own Branch, an answer its first message's.
//
// A text segment that a stopped process interrupted and the next one continued is one
// text part, as an uninterrupted run would have it (the encoder streams it so too); a
// text segment with no text has none, and one the run is still writing is
// "streaming".
func UIMessages(msgs []chat.Message, needsApproval func(tool string) bool) []map[string]any {
	out := []map[string]any{}
	var cur map[string]any
	curRun := ""
	var carry map[string]any // the text part an interrupted segment left open, if any
	for _, m := range msgs {
		isText := m.Role == chat.RoleAssistant && (m.Kind == chat.KindText || m.Kind == "")
		run := ""
		if m.RunID != nil {
			run = m.RunID.String()
		}
		switch {
		case m.Role == chat.RoleUser:
			id := m.RequestID
			if id == "" {
				id = m.ID.String()
			}
			um := map[string]any{"id": id, "role": "user", "parts": []any{map[string]any{"type": "text", "text": m.Content}}}
			if m.Branch != nil {
				um["metadata"] = branchMeta(m.Branch)
			}
			out = append(out, um)
			cur, curRun, carry = nil, "", nil
		case m.Role == chat.RoleAssistant || m.Role == chat.RoleTool:
			if cur == nil || curRun != run {
				cur = map[string]any{"id": run, "role": "assistant", "parts": []any{map[string]any{"type": "step-start"}}}
				if m.Branch != nil {
					cur["metadata"] = branchMeta(m.Branch)
				}
				curRun = run
				out = append(out, cur)
				carry = nil
			}
			if isText && m.Content == "" {
				continue // no text (yet): no part, and what it interrupted stays open
			}
			if isText && carry != nil {
				carry["text"] = carry["text"].(string) + m.Content
			} else if p := uiPart(m, needsApproval); p != nil {
				cur["parts"] = append(cur["parts"].([]any), p)
				carry = nil
				if isText {
					carry = p
				}
			}
			if !isText || m.Status != chat.MessageInterrupted {
				carry = nil
			}
		}
	}
	return out
}

func uiPart(m chat.Message, needsApproval func(string) bool) map[string]any {
	if m.Tool != nil {
		t := m.Tool
		p := map[string]any{"type": "tool-" + t.Name, "toolCallId": t.CallID, "input": rawOrNull(t.Input)}
		asked := needsApproval != nil && needsApproval(t.Name)
		if asked && t.Status != chat.ToolAwaitingApproval && t.Status != chat.ToolDenied && t.Status != chat.ToolRunning {
			// It ran, so a person approved it (the stream said so: tool-approval-response).
			p["approval"] = map[string]any{"id": t.CallID, "approved": true}
		}
		switch t.Status {
		case chat.ToolOK:
			p["state"], p["output"] = "output-available", deref(t.Output)
		case chat.ToolAwaitingApproval:
			p["state"], p["approval"] = "approval-requested", map[string]any{"id": t.CallID}
		case chat.ToolDenied:
			p["state"], p["approval"] = "output-denied", map[string]any{"id": t.CallID, "approved": false}
		case chat.ToolRunning:
			p["state"] = "input-available"
		default:
			text := deref(t.Output)
			if m.Error != nil && m.Error.Message != "" {
				text = m.Error.Message
			}
			if strings.TrimSpace(text) == "" {
				text = "the tool call " + string(t.Status)
			}
			p["state"], p["errorText"] = "output-error", text
		}
		return p
	}
	state := "done"
	if m.Status == chat.MessageStreaming {
		state = "streaming" // the run is still writing it
	}
	if m.Kind == chat.KindReasoning {
		return map[string]any{"type": "reasoning", "text": m.Content, "state": state}
	}
	if m.Kind == chat.KindText || m.Kind == "" {
		return map[string]any{"type": "text", "text": m.Content, "state": state}
	}
	return nil
}
