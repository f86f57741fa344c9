package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"strings"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport"
)

// MaxBodyBytes bounds a request body; a larger one is refused with bad_request.
const MaxBodyBytes = 16 << 10

// Sessions is a user's conversation list (hub.Sessions). Errors are *conversation.Error
// (CodeNotFound for a session that does not exist, is another user's or was deleted;
// CodeStorage; CodeInternal), or the context's error.
type Sessions interface {
	// List returns up to limit of owner's sessions, most recently active first, after
	// the cursor (nil: from the first).
	List(ctx context.Context, owner string, after *chat.SessionCursor, limit int) ([]chat.SessionSummary, error)
	// Rename sets the title of owner's session id and returns the session.
	Rename(ctx context.Context, owner string, id uuid.UUID, title string) (chat.SessionSummary, error)
	// Delete deletes owner's session id: its run cancelled, its sandbox killed, its
	// connections closed with 4004, its rows gone and its id never used again.
	Delete(ctx context.Context, owner string, id uuid.UUID) error
	// Messages returns a page of owner's session id: of its active path, or of the
	// branch through message through (nil: the active path), without selecting it.
	Messages(ctx context.Context, owner string, id uuid.UUID, through *uuid.UUID, before int64, limit int) (conversation.HistoryPage, error)
	// SelectBranch makes the branch through message msg the session's active path.
	SelectBranch(ctx context.Context, owner string, id, msg uuid.UUID) error
	// Run returns run runID of owner's session id, live when it is active.
	Run(ctx context.Context, owner string, id, runID uuid.UUID) (chat.Run, error)
	// Runs returns up to limit of the session's runs of statuses (none: all), newest
	// first, after the cursor (nil: from the newest).
	Runs(ctx context.Context, owner string, id uuid.UUID, statuses []chat.RunStatus, after *store.RunCursor, limit int) ([]chat.Run, error)
	// Send sends a message to owner's session id as chat.send does.
	Send(ctx context.Context, owner string, id uuid.UUID, req conversation.SendRequest) (hub.SendResult, error)
	// Create returns the session of a message sent without one: created at the first
	// request with its requestId, found again at a repeated one.
	Create(ctx context.Context, owner string, req conversation.SendRequest) (uuid.UUID, error)
	// Erase removes everything of owner: sessions (live ones closed), runs, messages,
	// webhook events, sandboxes and workspaces.
	Erase(ctx context.Context, owner string) (hub.Erasure, error)
	// Files lists the session's workspace; OpenFile opens one of its files.
	Files(ctx context.Context, owner string, id uuid.UUID) ([]sandbox.File, bool, error)
	OpenFile(ctx context.Context, owner string, id uuid.UUID, name string) (*os.File, fs.FileInfo, error)
}

// Config configures the API.
type Config struct {
	// Sessions is the conversation list. Required.
	Sessions Sessions
	// Auth maps the bearer token to a user; use the WebSocket's. Defaults to
	// transport.Anonymous.
	Auth transport.Authenticator
	// AllowedOrigins are the browser origins besides the server's own that may call the
	// API (CORS), as the WebSocket's (CHATD_ALLOWED_ORIGINS; see transport.OriginAllowed).
	AllowedOrigins []string
	// Logger is the parent logger.
	Logger zerolog.Logger
	// Relay sends a rename or a deletion of a session another live node holds to that
	// node, whose actor then renames or deletes it. nil: one node, nothing is relayed.
	Relay *transport.Relay
}

// API serves the HTTP JSON API.
type API struct {
	cfg Config
	log zerolog.Logger
	mux *http.ServeMux
}

// New returns the API.
func New(cfg Config) (*API, error) {
	if cfg.Sessions == nil {
		return nil, errors.New("httpapi config: Sessions is required")
	}
	if cfg.Auth == nil {
		cfg.Auth = transport.Anonymous{}
	}
	a := &API{cfg: cfg, log: cfg.Logger.With().Str("component", "httpapi").Logger(), mux: http.NewServeMux()}
	a.mux.HandleFunc("GET /v1/sessions", a.authed(a.list))
	a.mux.HandleFunc("DELETE /v1/users/me", a.authed(a.eraseMe))
	a.mux.HandleFunc("/v1/users/me", methodNotAllowed("DELETE"))
	a.mux.HandleFunc("POST /v1/sessions", a.authed(a.start))
	a.mux.HandleFunc("POST /v1/sessions/{id}/messages", a.authed(a.relayedLimit(MaxSendBodyBytes, a.send)))
	a.mux.HandleFunc("GET /v1/sessions/{id}/runs", a.authed(a.relayed(a.runs)))
	a.mux.HandleFunc("GET /v1/sessions/{id}/runs/{runId}", a.authed(a.relayed(a.run)))
	a.mux.HandleFunc("GET /v1/sessions/{id}/files", a.authed(a.relayed(a.files)))
	a.mux.HandleFunc("GET /v1/sessions/{id}/files/{path...}", a.authed(a.relayed(a.file)))
	a.mux.HandleFunc("PATCH /v1/sessions/{id}", a.authed(a.relayed(a.rename)))
	a.mux.HandleFunc("DELETE /v1/sessions/{id}", a.authed(a.relayed(a.delete)))
	a.mux.HandleFunc("GET /v1/sessions/{id}/messages", a.authed(a.relayed(a.messages)))
	a.mux.HandleFunc("POST /v1/sessions/{id}/branch", a.authed(a.relayed(a.selectBranch)))
	// What the routes above do not match is answered in JSON too.
	a.mux.HandleFunc("/v1/sessions", methodNotAllowed("GET, POST"))
	a.mux.HandleFunc("/v1/sessions/{id}/runs", methodNotAllowed("GET"))
	a.mux.HandleFunc("/v1/sessions/{id}/files", methodNotAllowed("GET"))
	a.mux.HandleFunc("/v1/sessions/{id}/files/{path...}", methodNotAllowed("GET"))
	a.mux.HandleFunc("/v1/sessions/{id}/runs/{runId}", methodNotAllowed("GET"))
	a.mux.HandleFunc("/v1/sessions/{id}", methodNotAllowed("PATCH, DELETE"))
	a.mux.HandleFunc("/v1/sessions/{id}/messages", methodNotAllowed("GET, POST"))
	a.mux.HandleFunc("/v1/sessions/{id}/branch", methodNotAllowed("POST"))
	a.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		a.writeError(w, r, &conversation.Error{Code: conversation.CodeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
	return a, nil
}

// ServeHTTP serves the API's routes, and CORS to the allowed origins: a page served
// elsewhere (a UI's own dev server, say) may list, rename and delete. Tokens travel in
// the Authorization header, never in cookies, so credentials are not allowed.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if CORS(w, r, a.cfg.AllowedOrigins, "GET, POST, PATCH, DELETE") {
		return
	}
	a.mux.ServeHTTP(w, r)
}

// CORS answers chatd's HTTP endpoints' cross-origin part: a request from an allowed
// origin gets its Access-Control-Allow-Origin, and its preflight (methods, the
// Authorization and Content-Type headers) is answered here, when CORS reports true.
// Another origin gets no CORS headers: its page cannot read the answer, and its
// preflight fails, so what needs one is never sent. Tokens travel in the Authorization
// header, never in cookies, so credentials are not allowed.
func CORS(w http.ResponseWriter, r *http.Request, origins []string, methods string) (answered bool) {
	origin := r.Header.Get("Origin")
	if origin == "" || !transport.OriginAllowed(r, origins) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", methods)
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// authed authenticates the request's bearer token and passes the user on.
func (a *API) authed(h func(w http.ResponseWriter, r *http.Request, owner string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Per user and changing: never from a cache (the PWA's service worker included).
		w.Header().Set("Cache-Control", "no-store")
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			a.writeError(w, r, &conversation.Error{Code: conversation.CodeUnauthorized, Message: `the Authorization header must be "Bearer <token>"`})
			return
		}
		owner, err := a.cfg.Auth.Authenticate(r.Context(), r, token)
		if err != nil {
			a.log.Debug().Err(err).Str("remote", r.RemoteAddr).Msg("refused a bearer token")
			a.writeError(w, r, &conversation.Error{Code: conversation.CodeUnauthorized, Message: "unauthorized"})
			return
		}
		h(w, r, owner)
	}
}

// bearer returns the token of an Authorization header ("" when there is none), and
// false for a header of another scheme.
func bearer(header string) (string, bool) {
	if header == "" {
		return "", true
	}
	scheme, token, _ := strings.Cut(header, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// statuses maps the protocol's error codes to HTTP statuses; a code not listed is a
// server fault (500).
var statuses = map[string]int{
	conversation.CodeBadRequest:   http.StatusBadRequest,
	conversation.CodeUnauthorized: http.StatusUnauthorized,
	conversation.CodeNotFound:     http.StatusNotFound,
	conversation.CodeConflict:     http.StatusConflict,
	conversation.CodeStorage:      http.StatusServiceUnavailable,
	conversation.CodeInternal:     http.StatusInternalServerError,
	CodeMoved:                     http.StatusServiceUnavailable,
}

// CodeMoved answers a request for a session another node holds, which could not be
// relayed there (unreachable, or the request was relayed already): retry.
const CodeMoved = "moved"

type wireError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// writeError answers with err: a *conversation.Error with its code and status, any
// other error as internal (logged). A client that went away gets nothing.
func (a *API) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ce *conversation.Error
	var ee *conversation.ElsewhereError
	switch {
	case errors.As(err, &ce):
	case r.Context().Err() != nil:
		return
	case errors.As(err, &ee):
		ce = &conversation.Error{Code: CodeMoved, Message: "the session is held by another chatd node that could not be reached from this one; retry"}
	default:
		a.log.Error().Err(err).Str("method", r.Method).Str("path", r.URL.Path).Msg("request failed")
		ce = &conversation.Error{Code: conversation.CodeInternal, Message: "internal error"}
	}
	status := Status(ce.Code)
	var body wireError
	body.Error.Code, body.Error.Message = ce.Code, ce.Message
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	writeJSON(w, status, body)
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body wireError
		body.Error.Code, body.Error.Message = conversation.CodeBadRequest, r.Method+" is not allowed here; use "+allow
		w.Header().Set("Allow", allow)
		writeJSON(w, http.StatusMethodNotAllowed, body)
	}
}

func badRequest(message string) error {
	return &conversation.Error{Code: conversation.CodeBadRequest, Message: message}
}

// writeJSON answers with v, which always encodes (the package's own wire types).
func writeJSON(w http.ResponseWriter, status int, v any) { WriteJSON(w, status, v) }

// WriteJSON answers with v as JSON, for chatd's HTTP endpoints.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Bearer returns the token of an Authorization header ("" when there is none), and
// false for a header of another scheme: for chatd's other HTTP endpoints.
func Bearer(header string) (string, bool) { return bearer(header) }

// Status is the HTTP status chatd answers an error code with.
func Status(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	switch code {
	case conversation.CodeRunActive, conversation.CodeNoRun, conversation.CodeQueueFull:
		return http.StatusConflict
	case conversation.CodeRateLimited, conversation.CodeTooManySessions:
		return http.StatusTooManyRequests
	case conversation.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusInternalServerError
}
