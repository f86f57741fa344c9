package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
)

// Page sizes of GET /v1/sessions.
const (
	DefaultLimit = 20
	MaxLimit     = 100
)

type wireSession struct {
	ID        uuid.UUID      `json:"id"`
	Title     string         `json:"title"`
	CreatedAt time.Time      `json:"createdAt"`
	UpdatedAt time.Time      `json:"updatedAt"`
	Preview   string         `json:"preview"`
	ActiveRun *wireActiveRun `json:"activeRun"` // null when none
	Usage     *wireUsage     `json:"usage,omitempty"`
	// Progress is the latest run's, as last stored; absent when it reported none.
	Progress *wireProgress `json:"progress,omitempty"`
}

type wireProgress struct {
	Step  int    `json:"step"`
	Of    int    `json:"of"`
	Label string `json:"label,omitempty"`
}

type wireActiveRun struct {
	RunID  uuid.UUID `json:"runId"`
	Status string    `json:"status"`
}

type wireUsage struct {
	ContextTokens int64 `json:"contextTokens"`
	ContextWindow int64 `json:"contextWindow"`
}

type wireSessionList struct {
	Sessions   []wireSession `json:"sessions"`
	NextCursor *string       `json:"nextCursor"` // null on the last page
}

func toWireSession(s chat.SessionSummary) wireSession {
	w := wireSession{ID: s.ID, Title: s.Title, CreatedAt: s.CreatedAt, UpdatedAt: s.ActiveAt, Preview: s.Preview}
	if s.ActiveRunStatus != "" {
		w.ActiveRun = &wireActiveRun{RunID: s.ActiveRunID, Status: string(s.ActiveRunStatus)}
	}
	if s.ContextTokens != 0 || s.ContextWindow != 0 {
		w.Usage = &wireUsage{ContextTokens: s.ContextTokens, ContextWindow: s.ContextWindow}
	}
	if p := s.Progress; p != nil {
		w.Progress = &wireProgress{Step: p.Step, Of: p.Of, Label: p.Label}
	}
	return w
}

// list is GET /v1/sessions?limit=N&cursor=C.
func (a *API) list(w http.ResponseWriter, r *http.Request, owner string) {
	q := r.URL.Query()
	limit := DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			a.writeError(w, r, badRequest(fmt.Sprintf("limit must be a number from 1 to %d", MaxLimit)))
			return
		}
		limit = n
	}
	var after *chat.SessionCursor
	if v := q.Get("cursor"); v != "" {
		c, err := decodeCursor(v)
		if err != nil {
			a.writeError(w, r, badRequest("cursor is not one this server gave out: pass nextCursor as it came"))
			return
		}
		after = &c
	}
	// One more than asked for says whether there is a next page.
	page, err := a.cfg.Sessions.List(r.Context(), owner, after, limit+1)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	out := wireSessionList{Sessions: make([]wireSession, 0, min(len(page), limit))}
	if len(page) > limit {
		page = page[:limit]
		last := page[limit-1]
		next := encodeCursor(chat.SessionCursor{ActiveAt: last.ActiveAt, ID: last.ID})
		out.NextCursor = &next
	}
	for _, s := range page {
		out.Sessions = append(out.Sessions, toWireSession(s))
	}
	writeJSON(w, http.StatusOK, out)
}

// rename is PATCH /v1/sessions/{id} with {"title": "..."}.
func (a *API) rename(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	var body struct {
		Title *string `json:"title"`
	}
	if err := readJSON(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	if body.Title == nil {
		a.writeError(w, r, badRequest("title is required"))
		return
	}
	title, err := chat.CheckTitle(*body.Title)
	if err != nil {
		a.writeError(w, r, badRequest(err.Error()))
		return
	}
	sum, err := a.cfg.Sessions.Rename(r.Context(), owner, id, title)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toWireSession(sum))
}

// delete is DELETE /v1/sessions/{id}.
func (a *API) delete(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	if err := a.cfg.Sessions.Delete(r.Context(), owner, id); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// messages is GET /v1/sessions/{id}/messages: a page of the session's active path, or,
// with ?through=, of the branch through that message, as the WebSocket's history sends
// them (?before=, ?limit= as history.fetch's).
func (a *API) messages(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	var before int64
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			a.writeError(w, r, badRequest("before must be a message position (1 or more)"))
			return
		}
		before = n
	}
	limit := 50
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > conversation.MaxHistoryLimit {
			a.writeError(w, r, badRequest(fmt.Sprintf("limit must be between 1 and %d", conversation.MaxHistoryLimit)))
			return
		}
		limit = n
	}
	var through *uuid.UUID
	if v := q.Get("through"); v != "" {
		m, err := uuid.Parse(v)
		if err != nil || m == uuid.Nil {
			a.writeError(w, r, badRequest("through must be the UUID of a message"))
			return
		}
		through = &m
	}
	page, err := a.cfg.Sessions.Messages(r.Context(), owner, id, through, before, limit)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": ws.MessagesJSON(page.Messages), "hasMore": page.HasMore})
}

// selectBranch is POST /v1/sessions/{id}/branch {"messageId"}: the branch through that
// message becomes the session's active path, for every tab (branch.selected).
func (a *API) selectBranch(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	var body struct {
		MessageID *string `json:"messageId"`
	}
	if err := readJSON(w, r, &body); err != nil {
		a.writeError(w, r, err)
		return
	}
	if body.MessageID == nil {
		a.writeError(w, r, badRequest("messageId is required"))
		return
	}
	msg, err := uuid.Parse(*body.MessageID)
	if err != nil || msg == uuid.Nil {
		a.writeError(w, r, badRequest("messageId must be the UUID of a message"))
		return
	}
	if err := a.cfg.Sessions.SelectBranch(r.Context(), owner, id, msg); err != nil {
		a.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionID reads the {id} of the path. An id that is not a UUID names no session:
// not_found, as an unknown one is. One that is not even text (chat.CheckID: not UTF-8,
// or with NUL) is bad_request: no session could have it, so saying so tells nothing.
func (a *API) sessionID(w http.ResponseWriter, r *http.Request) (uuid.UUID, bool) {
	if err := chat.CheckID(r.PathValue("id")); err != nil {
		a.writeError(w, r, badRequest("the session id "+err.Error()))
		return uuid.Nil, false
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil || id == uuid.Nil {
		a.writeError(w, r, &conversation.Error{Code: conversation.CodeNotFound, Message: "session not found"})
		return uuid.Nil, false
	}
	return id, true
}

// readJSON decodes the request body, at most MaxBodyBytes of one JSON object, into v.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return readJSONLimit(w, r, MaxBodyBytes, v)
}

// readJSONLimit is readJSON for a route whose bodies may be up to limit bytes.
func readJSONLimit(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
		return badRequest(fmt.Sprintf("the body is larger than %d bytes", limit))
	}
	if err != nil {
		return badRequest("could not read the body")
	}
	// Before decoding: encoding/json would make the bytes U+FFFD without a word.
	if err := chat.CheckJSONText(b); err != nil {
		return badRequest("the body " + err.Error())
	}
	if err := json.Unmarshal(b, v); err != nil {
		return badRequest("the body must be a JSON object: " + err.Error())
	}
	return nil
}

// A cursor names the last row of a keyset page: its time in microseconds (what
// PostgreSQL keeps) and its id (the last session's activity, the last run's start). It
// is opaque to clients: base64url, so it can change.
func encodeCursor(c chat.SessionCursor) string { return encodeKeyset(c.ActiveAt, c.ID) }

func decodeCursor(s string) (chat.SessionCursor, error) {
	at, id, err := decodeKeyset(s)
	return chat.SessionCursor{ActiveAt: at, ID: id}, err
}

func encodeKeyset(at time.Time, id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at.UnixMicro(), 10) + "." + id.String()))
}

func decodeKeyset(s string) (time.Time, uuid.UUID, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	at, id, ok := strings.Cut(string(b), ".")
	if !ok {
		return time.Time{}, uuid.Nil, errors.New("no separator")
	}
	us, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	t := time.UnixMicro(us).UTC()
	if t.Year() < 1 || t.Year() > 9999 {
		return time.Time{}, uuid.Nil, errors.New("time out of range") // PostgreSQL's would fail
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return time.Time{}, uuid.Nil, err
	}
	return t, u, nil
}
