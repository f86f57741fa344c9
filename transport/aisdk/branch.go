package aisdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
)

// Branches over the AI SDK (docs/ai-sdk.md, "Branches"). The SDK names messages by their
// UIMessage ids: an assistant message's is its run's id, a user message's the requestId
// it was sent with (chatd's message id when it has none). An edit is stored under a
// requestId of its own, derived from the id of the message it edits ("edit:<root>:<hash of
// the text>"), because useChat keeps that id for the new text: the id still names the
// edited message on the branch that shows the edit.

// maxKeyRoot bounds the part of a derived requestId that repeats a UIMessage id: a longer
// id is replaced by its hash, so that the key stays within chat.MaxRequestIDLen.
const maxKeyRoot = 90

// keyRoot is what a derived requestId keeps of the UIMessage id it is derived from.
func keyRoot(id string) string {
	if len(id) <= maxKeyRoot {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "#" + hex.EncodeToString(sum[:16])
}

// editKey is the requestId of the edit of the message useChat calls id to text: the same
// for a retried POST, another for other text.
func editKey(id, text string) string {
	sum := sha256.Sum256([]byte(text))
	return "edit:" + keyRoot(rootOf(id)) + ":" + hex.EncodeToString(sum[:8])
}

// rootOf is the UIMessage id of the message that id, or the edits it was derived from,
// first edited: the id useChat keeps for every edit of that message.
func rootOf(id string) string {
	if rest, ok := strings.CutPrefix(id, "edit:"); ok {
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			return rest[:i]
		}
	}
	return id
}

// sameMessage: a user message whose UIMessage id is uiID is, or is an edit of, the one
// useChat calls id.
func sameMessage(uiID, id string) bool {
	return uiID == id || keyRoot(rootOf(uiID)) == keyRoot(rootOf(id))
}

// uiID is a stored user message's UIMessage id.
func uiID(m chat.Message) string {
	if m.RequestID != "" {
		return m.RequestID
	}
	return m.ID.String()
}

// activePath reads the session's active path, as the transcript does.
func (h *Handler) activePath(ctx context.Context, sid uuid.UUID) ([]chat.Message, error) {
	msgs, _, err := h.cfg.Store.MessagesBefore(ctx, sid, 0, maxTranscript)
	if err != nil {
		return nil, conversation.StoreError("read the chat", err)
	}
	return msgs, nil
}

// userMessage finds the user message useChat calls id: on the active path first (what
// the client shows, where an edit of the message stands for it), then anywhere in the
// chat. ok is false when the chat has none.
func (h *Handler) userMessage(ctx context.Context, sid uuid.UUID, id string) (chat.Message, bool, error) {
	path, err := h.activePath(ctx, sid)
	if err != nil {
		return chat.Message{}, false, err
	}
	return h.userMessageOn(ctx, sid, path, id)
}

// userMessageOn is userMessage with the active path read already.
func (h *Handler) userMessageOn(ctx context.Context, sid uuid.UUID, path []chat.Message, id string) (chat.Message, bool, error) {
	for _, m := range path {
		if m.Role == chat.RoleUser && sameMessage(uiID(m), id) {
			return m, true, nil
		}
	}
	run, err := h.cfg.Store.RunByRequest(ctx, sid, id)
	switch {
	case err == nil && run.RetryOf == nil:
		msgs, err := h.cfg.Store.MessagesByRun(ctx, run.ID)
		if err != nil {
			return chat.Message{}, false, conversation.StoreError("read the chat", err)
		}
		if len(msgs) > 0 && msgs[0].Role == chat.RoleUser {
			return msgs[0], true, nil
		}
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return chat.Message{}, false, conversation.StoreError("read the chat", err)
	}
	if mid, err := uuid.Parse(id); err == nil {
		m, err := h.cfg.Store.MessageGet(ctx, mid)
		if err == nil && m.SessionID == sid && m.Role == chat.RoleUser {
			return m, true, nil
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return chat.Message{}, false, conversation.StoreError("read the chat", err)
		}
	}
	return chat.Message{}, false, nil
}

// edit makes send, a user message useChat sent with the messageId of one it holds
// (sendMessage({text, messageId})), an edit of the message that id names when its text
// differs: a sibling of it, under a requestId derived from the id and the text (or the
// new message's own id, when it has one other than id). The same
// text is the message sent again (a duplicate of its run). An id the chat does not have is
// a new message.
func (h *Handler) edit(ctx context.Context, sid uuid.UUID, id string, send conversation.SendRequest) (conversation.SendRequest, error) {
	m, ok, err := h.userMessage(ctx, sid, id)
	if err != nil || !ok {
		return send, err
	}
	if m.Content == send.Content {
		send.RequestID = uiID(m)
		return send, nil
	}
	send.EditOf = &m.ID
	if send.RequestID == "" || sameMessage(send.RequestID, id) {
		// useChat's edit keeps the edited message's id for the new text.
		send.RequestID = editKey(id, send.Content)
	}
	// Else the new text came with an id of its own (assistant-ui's edit): it keeps it,
	// so the client's message and the stored one are the same UIMessage.
	return send, nil
}

// maxRegenerations bounds the regenerations of one answer that one messageId makes.
const maxRegenerations = 100

// regenerate answers again, as a new branch, the user message that a regenerate-message
// names: messageId is an assistant message (a run: its user message) or a user message;
// without one (useChat's regenerate()), the last message of the body, which the SDK cut
// to the user message whose answer is regenerated, or else the chat's latest run.
//
// Its requestId is derived from messageId, so a retried POST streams the same new run.
// Once that run has ended and its answer is no longer shown (the client switched back to
// the old one), the same messageId regenerates again (a new key, counted on).
func (h *Handler) regenerate(ctx context.Context, a *conversation.Actor, sid uuid.UUID, req sendBody) (uuid.UUID, error) {
	h.flush(ctx, sid)
	target, run, err := h.regenerated(ctx, sid, req)
	if err != nil {
		return uuid.Nil, err
	}
	key := "regenerate:" + keyRoot(target)
	for i := 1; ; i++ {
		k := key
		if i > 1 {
			k = fmt.Sprintf("%s#%d", key, i)
		}
		res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: run, RequestID: k, Retry: true, Regenerate: true})
		if err != nil || !res.Duplicate || res.Status.Active() || i >= maxRegenerations {
			return res.RunID, err
		}
		shown, err := h.shown(ctx, sid, res.RunID)
		if err != nil || shown {
			return res.RunID, err
		}
	}
}

// regenerated returns what a regenerate-message's requestId is derived from, and the
// run whose user message it answers again. For an answer (messageId a run) that is the
// run: a retried POST is the same regeneration, and regenerating the new answer is
// another. For a user message (messageId one, or the body's last) it is the answer the
// active path shows under the message (another after each regeneration, as useChat's
// regenerate() names none), or the message itself when none is shown.
func (h *Handler) regenerated(ctx context.Context, sid uuid.UUID, req sendBody) (string, uuid.UUID, error) {
	id := req.MessageID
	if id != "" {
		if rid, err := uuid.Parse(id); err == nil {
			run, err := h.cfg.Store.RunGet(ctx, rid)
			if err == nil && run.SessionID == sid {
				return id, run.ID, nil
			}
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return "", uuid.Nil, conversation.StoreError("read the chat", err)
			}
		}
	} else if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "user" {
		id = req.Messages[n-1].ID
	}
	if id != "" {
		path, err := h.activePath(ctx, sid)
		if err != nil {
			return "", uuid.Nil, err
		}
		m, ok, err := h.userMessageOn(ctx, sid, path, id)
		switch {
		case err != nil:
			return "", uuid.Nil, err
		case ok && m.RunID != nil:
			if answer := answerOn(path, m.ID); answer != uuid.Nil {
				return answer.String(), *m.RunID, nil
			}
			return id, *m.RunID, nil
		case req.MessageID != "":
			return "", uuid.Nil, errorf(conversation.CodeNotFound, "the chat has no message %q to regenerate", id)
		}
	}
	latest, err := h.cfg.Store.RunLatest(ctx, sid)
	if err != nil {
		return "", uuid.Nil, errorf(conversation.CodeNoRun, "the chat has no answer to regenerate")
	}
	return latest.ID.String(), latest.ID, nil
}

// answerOn returns the run of the answer that path shows under user message id (uuid.Nil
// for none).
func answerOn(path []chat.Message, id uuid.UUID) uuid.UUID {
	for i, m := range path {
		if m.ID != id {
			continue
		}
		if i+1 < len(path) && path[i+1].Role != chat.RoleUser && path[i+1].RunID != nil {
			return *path[i+1].RunID
		}
		break
	}
	return uuid.Nil
}

// shown says whether run's answer is on the active path.
func (h *Handler) shown(ctx context.Context, sid, run uuid.UUID) (bool, error) {
	path, err := h.activePath(ctx, sid)
	if err != nil {
		return false, err
	}
	for _, m := range path {
		if m.Role != chat.RoleUser && m.RunID != nil && *m.RunID == run {
			return true, nil
		}
	}
	return false, nil
}

// branchMeta is the metadata of a UIMessage at a branch point: which of its alternatives
// it is (index, from 0), how many there are, and their chatd message ids, in the order
// they were made, for POST .../branch and GET ...?through=.
func branchMeta(b *chat.Branch) map[string]any {
	ids := make([]string, len(b.Siblings))
	for i, id := range b.Siblings {
		ids[i] = id.String()
	}
	return map[string]any{"chatd": map[string]any{"branch": map[string]any{"index": b.Index, "count": len(b.Siblings), "siblings": ids}}}
}

// messageParam reads a chatd message id: 400 when it is not one.
func messageParam(name, v string) (uuid.UUID, error) {
	id, err := uuid.Parse(v)
	if err != nil {
		return uuid.Nil, errorf(conversation.CodeBadRequest, "%s must be a chatd message id (a UUID, as in metadata.chatd.branch.siblings)", name)
	}
	return id, nil
}

// branchTarget is the chatd message that POST .../branch's messageId names: a chatd
// message id (as in metadata.chatd.branch.siblings), or a UIMessage id of the chat: an
// answer's (its run; the run's last message, so the branch shown ends where the answer
// does unless more was written below it) or a question's (its requestId).
func (h *Handler) branchTarget(ctx context.Context, sid uuid.UUID, id string) (uuid.UUID, error) {
	lastOf := func(run uuid.UUID, first bool) (uuid.UUID, bool, error) {
		msgs, err := h.cfg.Store.MessagesByRun(ctx, run)
		if err != nil {
			return uuid.Nil, false, conversation.StoreError("read the chat", err)
		}
		if len(msgs) == 0 {
			return uuid.Nil, false, nil
		}
		if first {
			return msgs[0].ID, msgs[0].Role == chat.RoleUser, nil
		}
		return msgs[len(msgs)-1].ID, true, nil
	}
	if u, err := uuid.Parse(id); err == nil {
		m, err := h.cfg.Store.MessageGet(ctx, u)
		switch {
		case err == nil && m.SessionID == sid:
			return u, nil
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return uuid.Nil, conversation.StoreError("read the chat", err)
		}
		run, err := h.cfg.Store.RunGet(ctx, u)
		switch {
		case err == nil && run.SessionID == sid:
			if mid, ok, err := lastOf(run.ID, false); err != nil || ok {
				return mid, err
			}
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return uuid.Nil, conversation.StoreError("read the chat", err)
		}
	}
	run, err := h.cfg.Store.RunByRequest(ctx, sid, id)
	switch {
	case err == nil:
		if mid, ok, err := lastOf(run.ID, true); err != nil || ok {
			return mid, err
		}
	case !errors.Is(err, store.ErrNotFound):
		return uuid.Nil, conversation.StoreError("read the chat", err)
	}
	return uuid.Nil, errorf(conversation.CodeNotFound, "messageId %q is no message of this chat (a chatd message id, or a UIMessage id from its transcript)", id)
}

// selectBranch is POST /v1/aisdk/chat/{id}/branch {"messageId"}: the branch through that
// message becomes the chat's active path (for every client, as a tab's branch.select);
// the answer is the new transcript. messageId is a chatd message id or a UIMessage id
// (branchTarget).
func (h *Handler) selectBranch(w http.ResponseWriter, r *http.Request, who caller) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	withBody(r, raw)
	var body struct {
		MessageID string `json:"messageId"`
	}
	if err == nil {
		if err = chat.CheckJSONText(raw); err != nil {
			writeError(w, errorf(conversation.CodeBadRequest, "the body %v", err))
			return
		}
		err = json.Unmarshal(raw, &body)
	}
	if err != nil || body.MessageID == "" {
		writeError(w, errorf(conversation.CodeBadRequest, `the body must be {"messageId": "<chatd message id>"}`))
		return
	}
	if _, err := uuid.Parse(body.MessageID); err != nil && !chat.ValidRequestID(body.MessageID) {
		writeError(w, errorf(conversation.CodeBadRequest, "messageId must be a chatd message id (a UUID, as in metadata.chatd.branch.siblings) or a UIMessage id of the chat"))
		return
	}
	sid, ok, err := h.session(r.Context(), who.owner, r.PathValue("id"), false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, errorf(conversation.CodeNotFound, "no such chat"))
		return
	}
	mid, err := h.branchTarget(r.Context(), sid, body.MessageID)
	if err != nil {
		writeError(w, err)
		return
	}
	err = h.cfg.Hub.Do(r.Context(), sid, func(a *conversation.Actor) error {
		if err := a.SelectBranch(r.Context(), mid); err != nil {
			return err
		}
		_ = a.Flush(r.Context()) // an error: a write waits for its retry; read what there is
		return nil
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	msgs, _, err := h.cfg.Store.MessagesBefore(r.Context(), sid, 0, maxTranscript)
	if err != nil {
		writeError(w, conversation.StoreError("read the chat", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": UIMessages(msgs, h.cfg.NeedsApproval)})
}
