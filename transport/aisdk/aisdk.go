// Package aisdk serves the Vercel AI SDK's chat transport: useChat with
// DefaultChatTransport (and resume: true) uses chatd as its backend. Its streams are the
// SDK's UI message stream protocol over Server-Sent Events, and each is a subscriber of
// the session's actor like a WebSocket tab: a run started here is live on the session's
// WebSocket tabs, and the other way round. docs/ai-sdk.md says how each chatd event maps
// to a stream part.
package aisdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/httpapi"
)

// MaxBodyBytes bounds a POST's body: useChat sends the whole conversation with each.
const MaxBodyBytes = 4 << 20

// MaxChatIDLen bounds a chat id.
const MaxChatIDLen = 200

// Store is what the endpoints need of the database.
type Store interface {
	SessionForClientID(ctx context.Context, owner, clientID string, now time.Time, max int) (uuid.UUID, bool, error)
	SessionByClientID(ctx context.Context, owner, clientID string) (uuid.UUID, bool, error)
	MessagesBefore(ctx context.Context, sessionID uuid.UUID, before int64, limit int) ([]chat.Message, bool, error)
	MessagesPath(ctx context.Context, sessionID uuid.UUID, leaf *uuid.UUID, before int64, limit int) ([]chat.Message, bool, error)
	MessageNewestBelow(ctx context.Context, sessionID, id uuid.UUID) (uuid.UUID, error)
	MessageLeaves(ctx context.Context, sessionID uuid.UUID, limit int) ([]uuid.UUID, error)
	MessageGet(ctx context.Context, id uuid.UUID) (chat.Message, error)
	MessagesByRun(ctx context.Context, runID uuid.UUID) ([]chat.Message, error)
	RunLatest(ctx context.Context, sessionID uuid.UUID) (chat.Run, error)
	RunGet(ctx context.Context, id uuid.UUID) (chat.Run, error)
	RunByRequest(ctx context.Context, sessionID uuid.UUID, requestID string) (chat.Run, error)
}

// Config configures the endpoints.
type Config struct {
	Hub   *hub.Hub
	Store Store
	// Auth is the WebSocket's and the API's: the token is the Authorization header's.
	Auth transport.Authenticator
	// SendQueueBytes is each stream's budget of queued events, as a WebSocket's; a
	// stream that does not keep up is ended.
	SendQueueBytes int
	Clock          clockwork.Clock
	Metrics        *transport.Metrics
	AllowedOrigins []string
	Logger         zerolog.Logger
	// Relay sends a request for a chat another live node holds to that node (several
	// nodes on one database); nil: one node.
	Relay *transport.Relay
	// NeedsApproval tells the tools whose calls wait for a person: the transcript shows
	// such a call that ran as approved, as the stream did. nil: none.
	NeedsApproval func(tool string) bool
	// Users counts each user's streams against the limit the node's WebSockets share
	// (CHATD_MAX_CONNS_PER_USER): one over it is answered 429 rate_limited. nil: no
	// limit.
	Users *transport.UserStreams
	// MaxContentBytes is the largest user message (the conversations'
	// MaxContentBytes): a POST is checked against it before its chat is created.
	// 0: conversation.DefaultMaxContentBytes.
	MaxContentBytes int
	// MaxSessionsPerUser bounds a user's live sessions (the conversations'): a POST
	// that would create one more is answered 429 too_many_sessions. 0: no limit.
	MaxSessionsPerUser int
}

// Handler serves /v1/aisdk/.
type Handler struct {
	cfg     Config
	log     zerolog.Logger
	mux     *http.ServeMux
	streams streams
}

// New returns the endpoints.
func New(cfg Config) *Handler {
	if cfg.Auth == nil {
		cfg.Auth = transport.Anonymous{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	if cfg.MaxContentBytes <= 0 {
		cfg.MaxContentBytes = conversation.DefaultMaxContentBytes
	}
	h := &Handler{cfg: cfg, log: cfg.Logger.With().Str("component", "aisdk").Logger(), mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/aisdk/chat", h.authed(h.send))
	h.mux.HandleFunc("GET /v1/aisdk/chat/{id}/stream", h.authed(h.resume))
	h.mux.HandleFunc("GET /v1/aisdk/chat/{id}/events", h.authed(h.events))
	h.mux.HandleFunc("POST /v1/aisdk/chat/{id}/stop", h.authed(h.stop))
	h.mux.HandleFunc("POST /v1/aisdk/chat/{id}/approve", h.authed(h.approve))
	h.mux.HandleFunc("POST /v1/aisdk/chat/{id}/branch", h.authed(h.selectBranch))
	h.mux.HandleFunc("GET /v1/aisdk/chat/{id}", h.authed(h.transcript))
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errorf(conversation.CodeNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP serves the endpoints, with CORS for the allowed origins (a UI's own server).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if httpapi.CORS(w, r, h.cfg.AllowedOrigins, "GET, POST") {
		return
	}
	h.mux.ServeHTTP(w, r)
}

func errorf(code, format string, args ...any) *conversation.Error {
	return &conversation.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, err error) {
	ce := (*conversation.Error)(nil)
	if !errors.As(err, &ce) {
		ce = errorf(conversation.CodeInternal, "internal error")
	}
	status := httpapi.Status(ce.Code)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": ce.Code, "message": ce.Message}})
}

// writeJSON answers with v: per user and changing, never from a cache.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteJSON(w, status, v)
}

// caller is who sent a request: the token's user, and when the token expires (zero:
// never). A stream ends when its token expires, as a WebSocket is closed.
type caller struct {
	owner   string
	expires time.Time
	token   string // the bearer token, for tools and agents that pass it on
}

func (h *Handler) authed(f func(w http.ResponseWriter, r *http.Request, who caller)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok := httpapi.Bearer(r.Header.Get("Authorization"))
		if !ok {
			writeError(w, errorf(conversation.CodeUnauthorized, `the Authorization header must be "Bearer <token>"`))
			return
		}
		owner, expires, err := transport.AuthenticateExpiry(r.Context(), h.cfg.Auth, r, token)
		if err != nil {
			writeError(w, errorf(conversation.CodeUnauthorized, "unauthorized"))
			return
		}
		f(w, r, caller{owner: owner, expires: expires, token: token})
	}
}

// internal answers a failure that is not the client's: logged, then 500 or the error's
// own code.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if ce := (*conversation.Error)(nil); errors.As(err, &ce) {
		writeError(w, ce)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	if ee := (*conversation.ElsewhereError)(nil); errors.As(err, &ee) {
		h.relay(w, r, ee.Lease.Addr)
		return
	}
	h.log.Error().Err(err).Str("path", r.URL.Path).Msg("request failed")
	writeError(w, err)
}

// relay sends the request on to the node at addr, which holds its chat's session (the
// request's body, read already, is sent again: see withBody). A request that was relayed
// already, or a node that cannot be reached, is answered moved: the client retries.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, addr string) {
	moved := func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, errorf(httpapi.CodeMoved, "the chat is held by another chatd node; retry"))
	}
	if h.cfg.Relay == nil || transport.Relayed(r) != "" || addr == "" {
		moved(w, r)
		return
	}
	h.cfg.Relay.Proxy(w, r, addr, func(*http.Response) { h.cfg.Relay.Metrics.RequestRelayed() }, moved)
}

// withBody makes r's body body again, for a request relayed after it was read.
func withBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
}

// validChatID checks a chat id before anything looks it up: one that is not text
// (chat.CheckID) would fail the database's statement, which is no outage.
func validChatID(id string) *conversation.Error {
	if err := chat.CheckID(id); err != nil {
		return errorf(conversation.CodeBadRequest, "the chat id %v", err)
	}
	if id == "" || len(id) > MaxChatIDLen {
		return errorf(conversation.CodeBadRequest, "the chat id must be 1 to %d bytes", MaxChatIDLen)
	}
	return nil
}

// checkBodyIDs checks the ids of a POST's body that chatd reads besides the chat id
// (chat.CheckID): its JSON was UTF-8 (checked before decoding), but an escape may still
// have put a NUL in one.
func checkBodyIDs(req sendBody) *conversation.Error {
	ids := [][2]string{{"messageId", req.MessageID}}
	if n := len(req.Messages); n > 0 {
		last := req.Messages[n-1]
		ids = append(ids, [2]string{"the last message's id", last.ID})
		for _, p := range last.Parts {
			ids = append(ids, [2]string{"toolCallId", p.ToolCallID})
			if p.Approval != nil {
				ids = append(ids, [2]string{"approval.id", p.Approval.ID})
			}
		}
	}
	for _, id := range ids {
		if err := chat.CheckID(id[1]); err != nil {
			return errorf(conversation.CodeBadRequest, "%s %v", id[0], err)
		}
	}
	return nil
}

// session returns the caller's session of chat id: created when create is set, else
// found (ok false when there is none). A deleted chat is not_found.
func (h *Handler) session(ctx context.Context, owner, id string, create bool) (uuid.UUID, bool, error) {
	if err := validChatID(id); err != nil {
		return uuid.Nil, false, err
	}
	var sid uuid.UUID
	var deleted bool
	var err error
	if create {
		sid, deleted, err = h.cfg.Store.SessionForClientID(ctx, owner, id, h.cfg.Clock.Now(), h.cfg.MaxSessionsPerUser)
	} else {
		sid, deleted, err = h.cfg.Store.SessionByClientID(ctx, owner, id)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return uuid.Nil, false, nil
	case errors.Is(err, store.ErrSessionLimit):
		h.cfg.Metrics.RateLimited(transport.LimitSessions)
		return uuid.Nil, false, errorf(conversation.CodeTooManySessions, "too many chats for this user (at most %d): delete one to start another", h.cfg.MaxSessionsPerUser)
	case err != nil:
		return uuid.Nil, false, conversation.StoreError("find the chat", err)
	case deleted:
		return uuid.Nil, false, errorf(conversation.CodeNotFound, "the chat was deleted")
	}
	return sid, true, nil
}

// uiMessage is the part of useChat's messages chatd reads.
type uiMessage struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Parts []struct {
		Type       string `json:"type"`
		Text       string `json:"text"`
		ToolCallID string `json:"toolCallId"`
		State      string `json:"state"`
		Approval   *struct {
			ID       string `json:"id"`
			Approved *bool  `json:"approved"`
		} `json:"approval"`
	} `json:"parts"`
}

type sendBody struct {
	ID        string      `json:"id"`
	Messages  []uiMessage `json:"messages"`
	Trigger   string      `json:"trigger"`
	MessageID string      `json:"messageId"`
	// WhileRunning is what a user message does while the chat's run is active (a
	// chat.send's whileRunning; "" for CHATD_DOUBLE_TEXT). useChat sends it as a
	// body option.
	WhileRunning string `json:"whileRunning"`
}

// send is POST /v1/aisdk/chat: the last user message starts a run (its id is the
// idempotency key), or edits the one messageId names; regenerate-message answers a
// question again (branch.go); an assistant message whose tool parts carry approval
// responses decides them. The answer is the run's stream.
// Everything the body asks is checked before anything is stored: a refused POST creates
// no chat. Only a user message creates one; the others need the chat to exist.
func (h *Handler) send(w http.ResponseWriter, r *http.Request, who caller) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		writeError(w, errorf(conversation.CodeTooLarge, "the body is over %d bytes", MaxBodyBytes))
		return
	}
	if err != nil {
		// It did not arrive whole in time (CHATD_HTTP_READ_TIMEOUT), or the client left.
		writeError(w, errorf(conversation.CodeBadRequest, "the body could not be read: %v", err))
		return
	}
	withBody(r, body) // for a relay to the chat's node
	// Before decoding: encoding/json would make the bytes U+FFFD without a word, and two
	// message ids (idempotency keys) one.
	if err := chat.CheckJSONText(body); err != nil {
		writeError(w, errorf(conversation.CodeBadRequest, "the body %v", err))
		return
	}
	var req sendBody
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, errorf(conversation.CodeBadRequest, "the body is not the JSON useChat sends: %v", err))
		return
	}
	if err := checkBodyIDs(req); err != nil {
		writeError(w, err)
		return
	}
	decisions, approvalRun, isApproval := approvals(req)
	create, err := h.checkSend(req, isApproval)
	if err != nil {
		writeError(w, err)
		return
	}
	// The stream's place is taken before anything is stored or started: a POST refused
	// for the user's streams has not started its run.
	release, ok := h.acquireStream(w, who)
	if !ok {
		return
	}
	defer release()
	sid, ok, err := h.session(r.Context(), who.owner, req.ID, create)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, errorf(conversation.CodeNotFound, "no such chat"))
		return
	}
	if isApproval {
		// useChat sending the conversation back after addToolApprovalResponse: it has
		// the run so far and appends what follows. Subscribe first, then decide, so the
		// stream misses nothing the decision sets going.
		h.streamWith(w, r, who, sid, approvalRun, streamOptions{continuation: true, counted: true, then: func(ctx context.Context) error {
			return h.cfg.Hub.Do(ctx, sid, func(a *conversation.Actor) error {
				for call, approved := range decisions {
					d := conversation.DecideRequest{CallID: call, Approved: approved, By: who.owner, Via: chat.DecidedViaAISDK}
					if _, err := a.DecideAs(ctx, d); err != nil && !isDecided(err) {
						return err
					}
				}
				return nil
			})
		}})
		return
	}
	var runID uuid.UUID
	var requestID string
	err = h.cfg.Hub.Do(r.Context(), sid, func(a *conversation.Actor) error {
		var err error
		runID, requestID, err = h.act(r.Context(), a, sid, req, who.token)
		return err
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	o := streamOptions{counted: true}
	if runID == uuid.Nil {
		// Queued behind the active run (whileRunning queue): the stream waits for the
		// run the message starts, and is that run from its start.
		o.awaitRequest = requestID
	}
	h.streamWith(w, r, who, sid, runID, o)
}

// checkSend checks a POST's body, and says whether it may create its chat: a new user
// message may, a regeneration, an approval or an assistant message may not.
func (h *Handler) checkSend(req sendBody, isApproval bool) (create bool, err error) {
	if err := validChatID(req.ID); err != nil {
		return false, err
	}
	if isApproval || req.Trigger == "regenerate-message" {
		return false, nil
	}
	if len(req.Messages) == 0 {
		return false, errorf(conversation.CodeBadRequest, "messages is empty")
	}
	last := req.Messages[len(req.Messages)-1]
	switch last.Role {
	case "user":
		if last.ID == "" {
			return false, errorf(conversation.CodeBadRequest, "the last message has no id")
		}
		return true, conversation.ValidateSend(userSend(last, req.WhileRunning), h.cfg.MaxContentBytes)
	case "assistant":
		if _, err := uuid.Parse(last.ID); err != nil {
			return false, errorf(conversation.CodeBadRequest, "the last message is an assistant message without an approval response")
		}
		return false, nil
	}
	return false, errorf(conversation.CodeBadRequest, "the last message's role is %q; chatd answers user messages", last.Role)
}

// userSend is the send a user message asks for: its text parts, its id the request id,
// with the policy while a run is active.
func userSend(m uiMessage, whileRunning string) conversation.SendRequest {
	var text []string
	for _, p := range m.Parts {
		if p.Type == "text" {
			text = append(text, p.Text)
		}
	}
	return conversation.SendRequest{RequestID: m.ID, Content: strings.Join(text, "\n"), WhileRunning: chat.DoubleText(whileRunning)}
}

// approvals reads the decisions of a POST whose last message is the assistant's with
// tool parts answered by addToolApprovalResponse (state approval-responded): call id →
// approved, and the run (the message's id).
func approvals(req sendBody) (map[string]bool, uuid.UUID, bool) {
	if len(req.Messages) == 0 || req.Trigger == "regenerate-message" {
		return nil, uuid.Nil, false
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role != "assistant" {
		return nil, uuid.Nil, false
	}
	run, err := uuid.Parse(last.ID)
	if err != nil {
		return nil, uuid.Nil, false
	}
	decisions := map[string]bool{}
	for _, p := range last.Parts {
		if p.State != "approval-responded" || p.Approval == nil || p.Approval.Approved == nil {
			continue
		}
		call := p.ToolCallID
		if call == "" {
			call = p.Approval.ID
		}
		decisions[call] = *p.Approval.Approved
	}
	return decisions, run, len(decisions) > 0
}

// act does what a POST asks of the session's actor and returns the run to stream, and
// the requestId of a user message it sent (whose run, queued, may not have started).
func (h *Handler) act(ctx context.Context, a *conversation.Actor, sid uuid.UUID, req sendBody, token string) (uuid.UUID, string, error) {
	if req.Trigger == "regenerate-message" {
		run, err := h.regenerate(ctx, a, sid, req)
		return run, "", err
	}
	last := req.Messages[len(req.Messages)-1]
	if last.Role == "user" {
		send := userSend(last, req.WhileRunning)
		send.Token = token
		if req.MessageID != "" {
			// sendMessage({text, messageId}): an edit of the message it names.
			h.flush(ctx, sid)
			var err error
			if send, err = h.edit(ctx, sid, req.MessageID, send); err != nil {
				return uuid.Nil, "", err
			}
		}
		res, err := a.Send(ctx, send)
		return res.RunID, send.RequestID, err
	}
	// An assistant message without approval answers (send decides those): the message
	// is a run, streamed as it is (checkSend made sure its id is one).
	id, _ := uuid.Parse(last.ID)
	return id, "", nil
}

// flush waits for the writes the session's actor on this node has made, when it has
// one: they are stored behind the events (write-behind), and what the database answers
// next must include what clients were told. Another node's actor is ahead of the
// database by its writes in flight at most.
func (h *Handler) flush(ctx context.Context, sid uuid.UUID) {
	if a, ok := h.cfg.Hub.Lookup(sid); ok {
		_ = a.Flush(ctx) // an error: a write waits for its retry; read what there is
	}
}

// isDecided: a decision that came before this one (a retried POST).
func isDecided(err error) bool {
	ce := (*conversation.Error)(nil)
	return errors.As(err, &ce) && ce.Code == conversation.CodeConflict
}

// resume is GET /v1/aisdk/chat/{id}/stream: the active run from its start, then live;
// 204 when there is none.
func (h *Handler) resume(w http.ResponseWriter, r *http.Request, who caller) {
	sid, ok, err := h.session(r.Context(), who.owner, r.PathValue("id"), false)
	if err != nil {
		if ce := (*conversation.Error)(nil); errors.As(err, &ce) && ce.Code == conversation.CodeNotFound {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.fail(w, r, err)
		return
	}
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.flush(r.Context(), sid)
	latest, err := h.cfg.Store.RunLatest(r.Context(), sid)
	if err != nil || !latest.Status.Active() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.stream(w, r, who, sid, latest.ID, true)
}

// stop is POST /v1/aisdk/chat/{id}/stop: cancels the active run, for every client.
func (h *Handler) stop(w http.ResponseWriter, r *http.Request, who caller) {
	sid, ok, err := h.session(r.Context(), who.owner, r.PathValue("id"), false)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !ok {
		writeJSON(w, http.StatusOK, map[string]bool{"stopped": false})
		return
	}
	err = h.cfg.Hub.Do(r.Context(), sid, func(a *conversation.Actor) error {
		_, err := a.Cancel(r.Context(), uuid.Nil)
		return err
	})
	if ce := (*conversation.Error)(nil); errors.As(err, &ce) && ce.Code == conversation.CodeNoRun {
		writeJSON(w, http.StatusOK, map[string]bool{"stopped": false})
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"stopped": true})
}

// approve is POST /v1/aisdk/chat/{id}/approve {toolCallId, approved, inputHash?, scope?}.
func (h *Handler) approve(w http.ResponseWriter, r *http.Request, who caller) {
	var body struct {
		ToolCallID string `json:"toolCallId"`
		Approved   *bool  `json:"approved"`
		InputHash  string `json:"inputHash"`
		Scope      string `json:"scope"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<10))
	withBody(r, raw)
	if err == nil {
		if err = chat.CheckJSONText(raw); err != nil {
			writeError(w, errorf(conversation.CodeBadRequest, "the body %v", err))
			return
		}
		err = json.Unmarshal(raw, &body)
	}
	if err != nil || body.ToolCallID == "" || body.Approved == nil {
		writeError(w, errorf(conversation.CodeBadRequest, `the body must be {"toolCallId": "...", "approved": true|false}`))
		return
	}
	if err := chat.CheckID(body.ToolCallID); err != nil {
		writeError(w, errorf(conversation.CodeBadRequest, "toolCallId %v", err))
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
	err = h.cfg.Hub.Do(r.Context(), sid, func(a *conversation.Actor) error {
		_, err := a.DecideAs(r.Context(), conversation.DecideRequest{
			CallID: body.ToolCallID, Approved: *body.Approved, InputHash: body.InputHash, Scope: body.Scope,
			By: who.owner, Via: chat.DecidedViaHTTP,
		})
		return err
	})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}
