package httpapi

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport/ws"
)

// MaxSendBodyBytes bounds the body of a message sent over HTTP: room for the largest
// content chatd takes (CHATD_MAX_CONTENT_BYTES is checked after), JSON-escaped.
const MaxSendBodyBytes = 1 << 20

// sendBody is a message sent over HTTP: chat.send's fields.
type sendBody struct {
	RequestID    *string `json:"requestId"`
	Content      *string `json:"content"`
	WhileRunning string  `json:"whileRunning"`
}

// sendAnswer is the answer to a message sent over HTTP.
type sendAnswer struct {
	SessionID uuid.UUID `json:"sessionId"`
	RequestID string    `json:"requestId"`
	// Run is the run the message started (null while it is queued).
	Run    any  `json:"run"`
	Queued bool `json:"queued"`
	// Steering: the message was given to the active run, Run, as a user turn.
	Steering bool `json:"steering,omitempty"`
}

// readSend reads and checks a send's body.
func readSend(w http.ResponseWriter, r *http.Request) (conversation.SendRequest, error) {
	var body sendBody
	if err := readJSONLimit(w, r, MaxSendBodyBytes, &body); err != nil {
		return conversation.SendRequest{}, err
	}
	switch {
	case body.RequestID == nil:
		return conversation.SendRequest{}, badRequest("requestId is required")
	case body.Content == nil:
		return conversation.SendRequest{}, badRequest("content is required")
	}
	token, _ := bearer(r.Header.Get("Authorization"))
	return conversation.SendRequest{
		RequestID: *body.RequestID, Content: *body.Content,
		WhileRunning: chat.DoubleText(body.WhileRunning), Token: token,
	}, nil
}

// answerSend answers a send: 202 with the run it started, or queued.
func answerSend(w http.ResponseWriter, session uuid.UUID, req conversation.SendRequest, res hub.SendResult) {
	out := sendAnswer{SessionID: session, RequestID: req.RequestID, Queued: res.Queued, Steering: res.Steering}
	if res.Run != nil {
		out.Run = ws.RunJSON(*res.Run)
		w.Header().Set("Location", "/v1/sessions/"+session.String()+"/runs/"+res.Run.ID.String())
	}
	writeJSON(w, http.StatusAccepted, out)
}

// start is POST /v1/sessions {"requestId","content"}: a new session, and its first
// message's run, started without a stream. With several nodes, a repeated request for
// a session another live node holds by now is sent on to that node.
func (a *API) start(w http.ResponseWriter, r *http.Request, owner string) {
	reset, err := bufferBody(w, r, MaxSendBodyBytes)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	req, err := readSend(w, r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	id, err := a.cfg.Sessions.Create(r.Context(), owner, req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	serve := func(w http.ResponseWriter, r *http.Request) {
		res, err := a.cfg.Sessions.Send(r.Context(), owner, id, req)
		if err != nil {
			a.writeError(w, r, err)
			return
		}
		answerSend(w, id, req, res)
	}
	if a.cfg.Relay != nil {
		if addr, ok := a.cfg.Relay.Owner(r, id); ok {
			reset(r)
			a.cfg.Relay.Proxy(w, r, addr, func(*http.Response) { a.cfg.Relay.Metrics.RequestRelayed() }, serve)
			return
		}
	}
	serve(w, r)
}

// send is POST /v1/sessions/{id}/messages {"requestId","content","whileRunning"}: the
// message starts a run as chat.send does, answered at once.
func (a *API) send(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	req, err := readSend(w, r)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	res, err := a.cfg.Sessions.Send(r.Context(), owner, id, req)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	answerSend(w, id, req, res)
}

// run is GET /v1/sessions/{id}/runs/{runId}: the run as the session's tabs know it.
func (a *API) run(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	runID, err := uuid.Parse(r.PathValue("runId"))
	if err != nil || runID == uuid.Nil {
		a.writeError(w, r, &conversation.Error{Code: conversation.CodeNotFound, Message: "run not found"})
		return
	}
	run, err := a.cfg.Sessions.Run(r.Context(), owner, id, runID)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": ws.RunJSON(run)})
}

// runs is GET /v1/sessions/{id}/runs?status=…&limit=N&cursor=C: the session's runs,
// newest first.
func (a *API) runs(w http.ResponseWriter, r *http.Request, owner string) {
	id, ok := a.sessionID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			a.writeError(w, r, badRequest("limit must be between 1 and 100"))
			return
		}
		limit = n
	}
	var statuses []chat.RunStatus
	for _, v := range q["status"] {
		for s := range strings.SplitSeq(v, ",") {
			st := chat.RunStatus(strings.TrimSpace(s))
			if !knownStatus(st) {
				a.writeError(w, r, badRequest("status "+strconv.Quote(s)+" is not a run status"))
				return
			}
			statuses = append(statuses, st)
		}
	}
	var after *store.RunCursor
	if v := q.Get("cursor"); v != "" {
		c, err := decodeRunCursor(v)
		if err != nil {
			a.writeError(w, r, badRequest("cursor is not one this API gave"))
			return
		}
		after = &c
	}
	runs, err := a.cfg.Sessions.Runs(r.Context(), owner, id, statuses, after, limit+1)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	var next *string
	if len(runs) > limit {
		runs = runs[:limit]
		last := runs[limit-1]
		c := encodeRunCursor(store.RunCursor{StartedAt: last.StartedAt, ID: last.ID})
		next = &c
	}
	out := make([]any, len(runs))
	for i, run := range runs {
		out[i] = ws.RunJSON(run)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out, "nextCursor": next})
}

func knownStatus(s chat.RunStatus) bool {
	switch s {
	case chat.RunRunning, chat.RunAwaitingApproval, chat.RunPaused, chat.RunDone, chat.RunError, chat.RunCancelled, chat.RunInterrupted:
		return true
	}
	return false
}

// A runs cursor names the last run of a page (encodeKeyset): its start and its id.
func encodeRunCursor(c store.RunCursor) string { return encodeKeyset(c.StartedAt, c.ID) }

func decodeRunCursor(s string) (store.RunCursor, error) {
	at, id, err := decodeKeyset(s)
	return store.RunCursor{StartedAt: at, ID: id}, err
}

// eraseMe is DELETE /v1/users/me: the caller erases everything of theirs. The anonymous
// user (no authentication) is every client's: erasing it is the admin listener's to do.
func (a *API) eraseMe(w http.ResponseWriter, r *http.Request, owner string) {
	if owner == "" {
		a.writeError(w, r, badRequest("this chatd has no authentication: its one anonymous user is everyone's; erase it from the admin listener (DELETE /users/) if you mean it"))
		return
	}
	e, err := a.cfg.Sessions.Erase(r.Context(), owner)
	if err != nil {
		a.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"erased": e})
}
