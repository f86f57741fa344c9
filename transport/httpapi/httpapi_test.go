package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport"
	"github.com/chatd/chatd/transport/httpapi"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Tokens of the test users; any other token is refused.
const (
	alice = "alice-token"
	bob   = "bob-token"
)

// tokens is an authenticator that maps each known token to its user.
type tokens map[string]string

func (m tokens) Authenticate(_ context.Context, _ *http.Request, token string) (string, error) {
	if u, ok := m[token]; ok {
		return u, nil
	}
	return "", errors.New("unknown token")
}

// env is chatd's HTTP surface (WebSocket and HTTP API) on a real database, with local
// sandboxes and a scripted agent whose reply depends on the message:
//
//	"... approve ..."  asks to approve a shell call and waits for it
//	"... wait ..."     streams "partial" and waits at env.gate
//	"... usage ..."    reports context usage, then replies
//	anything else      replies "ok: <message>"
type env struct {
	t         *testing.T
	st        *store.Store
	hub       *hub.Hub
	clock     *clockwork.FakeClock // the conversations': run start times
	provider  *local.Provider
	sandboxes *agent.Sandboxes
	gate      *script.Gate
	ts        *httptest.Server
	wsURL     string
}

// newEnv starts a server; on st when given (a second node on the same database).
func newEnv(t *testing.T, st *store.Store) *env {
	t.Helper()
	return newEnvAuth(t, st, tokens{alice: "alice", bob: "bob"})
}

// newEnvAuth is newEnv with the WebSocket and the API on auth.
func newEnvAuth(t *testing.T, st *store.Store, auth transport.Authenticator) *env {
	t.Helper()
	if st == nil {
		st = storetest.New(t)
	}
	e := &env{t: t, st: st, clock: clockwork.NewFakeClock(), gate: script.NewGate()}
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)

	var err error
	e.provider, err = local.New(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(e.provider.Close)
	e.sandboxes = agent.NewSandboxes(e.provider, st, e.clock)

	h, err := hub.New(conversation.Config{Store: st, Agent: script.PerRun(e.script), Clock: e.clock, Logger: log}, log)
	require.NoError(t, err)
	e.hub = h
	wsSrv, err := ws.New(ws.Config{Hub: h, Auth: auth, Logger: log, Clock: clockwork.NewFakeClock()})
	require.NoError(t, err)
	api, err := httpapi.New(httpapi.Config{Sessions: hub.NewSessions(h, st, e.sandboxes), Auth: auth, AllowedOrigins: []string{"localhost:5173"}, Logger: log})
	require.NoError(t, err)
	srv, err := transport.New(transport.Config{WebSocket: wsSrv, API: api, Ready: st.Ping, Logger: log})
	require.NoError(t, err)
	e.ts = httptest.NewServer(srv.Handler())
	e.wsURL = "ws" + strings.TrimPrefix(e.ts.URL, "http") + "/v1/ws"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
		require.NoError(t, srv.Shutdown(ctx))
		e.ts.Close()
	})
	return e
}

func (e *env) script(req conversation.Request) []script.Step {
	switch c := req.Content; {
	case strings.Contains(c, "approve"):
		return []script.Step{script.Text("Let me look."), script.Approval("c1", "shell", `{"command": "ls"}`, "file.txt", nil)}
	case strings.Contains(c, "wait"):
		return []script.Step{script.Text("partial"), e.gate.Wait(), script.Text(" never")}
	case strings.Contains(c, "usage"):
		return []script.Step{func(_ context.Context, out conversation.Emitter) error {
			return out.Usage(chat.Usage{InputTokens: 1200, OutputTokens: 30, ContextTokens: 1230, ContextWindow: 64000})
		}, script.Text("counted")}
	}
	return []script.Step{script.Text("ok: " + req.Content)}
}

// tab opens a WebSocket as the user of token and says hello to sessionID ("" for a new
// session).
func (e *env) tab(token, sessionID string) *wstest.Client {
	e.t.Helper()
	c := wstest.Dial(e.t, e.wsURL, nil)
	c.Token = token
	c.Hello(sessionID)
	return c
}

// chat starts a session of token's user, one second after the last run started, with
// one message, and returns the tab once the run has ended (or waits for an approval).
func (e *env) chat(token, content string) *wstest.Client {
	e.t.Helper()
	c := e.tab(token, "")
	e.send(c, "r1", content)
	return c
}

// send sends content on tab c one second after the last run started and waits for its
// run to end, or to wait for an approval.
func (e *env) send(c *wstest.Client, requestID, content string) wstest.Frame {
	e.t.Helper()
	e.clock.Advance(time.Second)
	ack := c.Chat(requestID, content)
	require.Equal(e.t, "ack", ack.Type, "%s", ack.Raw)
	started := c.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" && f.RequestID == requestID })
	if strings.Contains(content, "approve") {
		c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	} else if !strings.Contains(content, "wait") {
		c.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == requestID })
	}
	return started
}

type session struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	Preview   string    `json:"preview"`
	ActiveRun *struct {
		RunID  string `json:"runId"`
		Status string `json:"status"`
	} `json:"activeRun"`
	Usage *struct {
		ContextTokens int64 `json:"contextTokens"`
		ContextWindow int64 `json:"contextWindow"`
	} `json:"usage"`
}

type sessionList struct {
	Sessions   []session `json:"sessions"`
	NextCursor *string   `json:"nextCursor"`
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// response is an answer of the API.
type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request with the bearer token (none when "") and checks the answer's body
// against docs/protocol.schema.json: an HttpError for any error status.
func (e *env) do(method, path, token string, body []byte) response {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.ts.URL+path, bytes.NewReader(body))
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.ts.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	if resp.StatusCode >= 400 {
		require.Equal(e.t, "application/json", resp.Header.Get("Content-Type"))
		require.NoError(e.t, wstest.ValidateDefinition("HttpError", b))
	}
	return response{resp.StatusCode, resp.Header, b}
}

// errorOf asserts that r is an error with status and code, and returns its message.
func (e *env) errorOf(r response, status int, code string) string {
	e.t.Helper()
	require.Equal(e.t, status, r.status, "%s", r.body)
	var ae apiError
	require.NoError(e.t, json.Unmarshal(r.body, &ae))
	require.Equal(e.t, code, ae.Error.Code)
	return ae.Error.Message
}

// list reads one page of token's user's sessions.
func (e *env) list(token, query string) sessionList {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions"+query, token, nil)
	require.Equal(e.t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(e.t, wstest.ValidateDefinition("SessionList", r.body))
	var l sessionList
	require.NoError(e.t, json.Unmarshal(r.body, &l))
	return l
}

// all follows the cursors with pages of limit and returns every session listed.
func (e *env) all(token string, limit int) []session {
	e.t.Helper()
	var out []session
	query := "?limit=" + strconv.Itoa(limit)
	for pages := 0; ; pages++ {
		require.Less(e.t, pages, 100, "the cursors never end")
		l := e.list(token, query)
		require.LessOrEqual(e.t, len(l.Sessions), limit)
		out = append(out, l.Sessions...)
		if l.NextCursor == nil {
			return out
		}
		require.Len(e.t, l.Sessions, limit, "only the last page is short")
		query = "?limit=" + strconv.Itoa(limit) + "&cursor=" + *l.NextCursor
	}
}

func (e *env) rename(token, id, title string) response {
	e.t.Helper()
	b, err := json.Marshal(map[string]string{"title": title})
	require.NoError(e.t, err)
	return e.do(http.MethodPatch, "/v1/sessions/"+id, token, b)
}

func ids(ss []session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func find(t *testing.T, ss []session, id string) session {
	t.Helper()
	for _, s := range ss {
		if s.ID == id {
			return s
		}
	}
	t.Fatalf("session %s is not listed", id)
	return session{}
}

// closeOf reads c until its connection closes and returns the close frame.
func closeOf(t *testing.T, c *wstest.Client) websocket.CloseError {
	t.Helper()
	for {
		_, err := c.TryRead()
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		require.ErrorAs(t, err, &ce, "the connection ended without a close frame")
		return ce
	}
}

func (e *env) count(table, sessionID string) int {
	e.t.Helper()
	var n int
	require.NoError(e.t, e.st.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table+" WHERE session_id = $1", sessionID).Scan(&n))
	return n
}

// The list pages with its cursor through the user's sessions, most recently active
// first, and shows each one's title, preview, active run and usage.
func TestListPagesByActivity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	first := e.chat(alice, "hello   first\nof all")
	long := e.chat(alice, strings.Repeat("a long message ", 20))
	usage := e.chat(alice, "count my usage")
	approval := e.chat(alice, "please approve this")
	e.tab(alice, "")                               // never sent to: not listed
	e.chat(bob, "bob's")                           // another user's: not listed
	again := e.send(first, "r2", "second message") // first is now the most recent

	got := e.all(alice, 2)
	require.Equal(t, []string{first.State.SessionID, approval.State.SessionID, usage.State.SessionID, long.State.SessionID}, ids(got))
	require.Equal(t, ids(got), ids(e.list(alice, "").Sessions), "the default page holds them all")
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].UpdatedAt.After(got[i-1].UpdatedAt))
	}

	s := find(t, got, first.State.SessionID)
	require.Equal(t, "hello first of all", s.Title, "titled from the first message only")
	require.Equal(t, "ok: second message", s.Preview, "the newest text message")
	require.Nil(t, s.ActiveRun)
	require.Nil(t, s.Usage)
	require.True(t, s.UpdatedAt.Equal(again.Run.StartedAt), "updatedAt is the latest run's start: %s, %s", s.UpdatedAt, again.Run.StartedAt)
	require.True(t, s.CreatedAt.Before(s.UpdatedAt))

	s = find(t, got, long.State.SessionID)
	require.Equal(t, strings.TrimSpace(strings.Repeat("a long message ", 20))[:80]+"…", s.Title)
	require.Len(t, []rune(s.Preview), 120, "the reply, cut to 120 characters")
	require.True(t, strings.HasPrefix(s.Preview, "ok: a long message"))

	s = find(t, got, usage.State.SessionID)
	require.NotNil(t, s.Usage)
	require.EqualValues(t, 1230, s.Usage.ContextTokens)
	require.EqualValues(t, 64000, s.Usage.ContextWindow)

	s = find(t, got, approval.State.SessionID)
	require.NotNil(t, s.ActiveRun, "a run awaiting approval is active")
	require.Equal(t, "awaiting_approval", s.ActiveRun.Status)
	require.Equal(t, approval.State.ActiveRun.RunID, s.ActiveRun.RunID)

	require.Len(t, e.list(bob, "").Sessions, 1)

	for query, want := range map[string]string{
		"?limit=0":          "limit",
		"?limit=101":        "limit",
		"?limit=ten":        "limit",
		"?cursor=!!!":       "cursor",
		"?cursor=bm9wZQ":    "cursor", // base64url of "nope"
		"?cursor=" + "MTIz": "cursor", // base64url of "123": no id
	} {
		msg := e.errorOf(e.do(http.MethodGet, "/v1/sessions"+query, alice, nil), http.StatusBadRequest, "bad_request")
		require.Contains(t, msg, want, query)
	}
}

// A person's title replaces the one taken from the first message for good, and leaves
// the session's place in the list alone.
func TestRename(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.chat(alice, "plan a trip")
	id := c.State.SessionID
	before := find(t, e.all(alice, 10), id)

	r := e.rename(alice, id, "  Trip to Rome ")
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(t, wstest.ValidateDefinition("Session", r.body))
	var renamed session
	require.NoError(t, json.Unmarshal(r.body, &renamed))
	require.Equal(t, "Trip to Rome", renamed.Title)
	require.Equal(t, id, renamed.ID)
	require.True(t, renamed.UpdatedAt.Equal(before.UpdatedAt), "a rename is not activity")
	require.Equal(t, before.Preview, renamed.Preview)

	e.send(c, "r2", "and a second message")
	require.Equal(t, "Trip to Rome", find(t, e.all(alice, 10), id).Title, "later messages do not rename it")

	for title, want := range map[string]string{
		"":                       "empty",
		"   ":                    "empty",
		strings.Repeat("é", 201): "longer than 200",
		"a\x00b":                 "NUL",
	} {
		msg := e.errorOf(e.rename(alice, id, title), http.StatusBadRequest, "bad_request")
		require.Contains(t, msg, want)
	}
	require.Equal(t, http.StatusOK, e.rename(alice, id, strings.Repeat("é", 200)).status)
	for body, want := range map[string]string{
		`not json`:     "JSON",
		`{}`:           "title is required",
		`{"title": 5}`: "JSON",
		`["title"]`:    "JSON",
		`{"title":"` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`: "larger",
		// Not made U+FFFD by the decoder: refused as it came.
		"{\"title\":\"trip \xff\"}": "the body is not valid UTF-8",
	} {
		msg := e.errorOf(e.do(http.MethodPatch, "/v1/sessions/"+id, alice, []byte(body)), http.StatusBadRequest, "bad_request")
		require.Contains(t, msg, want, body)
	}
	e.errorOf(e.rename(alice, "not-a-uuid", "x"), http.StatusNotFound, "not_found")
	// An id that is not even text is no session's: bad_request, not a database error.
	for path, want := range map[string]string{"%FF": "the session id is not valid UTF-8", "a%00b": "the session id contains a NUL"} {
		require.Contains(t, e.errorOf(e.rename(alice, path, "x"), http.StatusBadRequest, "bad_request"), want)
		require.Contains(t, e.errorOf(e.do(http.MethodDelete, "/v1/sessions/"+path, alice, nil), http.StatusBadRequest, "bad_request"), want)
	}
	e.errorOf(e.rename(alice, uuid.NewString(), "x"), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodPut, "/v1/sessions", alice, nil), http.StatusMethodNotAllowed, "bad_request")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+id, alice, nil), http.StatusMethodNotAllowed, "bad_request")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+id+"/more", alice, nil), http.StatusNotFound, "not_found")
}

// Deleting a session with a run streaming and two tabs open: the run is cancelled, the
// tabs are closed with 4004 "session deleted", the sandbox is killed and its workspace
// removed, the rows are gone, and the id can never be used again.
func TestDeleteWithARunActiveAndTabsOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	a := e.tab(alice, "")
	id := a.State.SessionID
	b := e.tab(alice, id)
	sid := uuid.MustParse(id)
	sb, _, err := e.sandboxes.Get(t.Context(), sid)
	require.NoError(t, err)
	e.send(a, "r1", "stream and wait")
	for _, tab := range []*wstest.Client{a, b} {
		tab.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	}

	r := e.do(http.MethodDelete, "/v1/sessions/"+id, alice, nil)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	require.Empty(t, r.body)

	for _, tab := range []*wstest.Client{a, b} {
		ce := closeOf(t, tab)
		require.Equal(t, websocket.StatusCode(4004), ce.Code)
		require.Equal(t, "session deleted", ce.Reason)
		require.Equal(t, "chat.cancelled", tab.Seen[len(tab.Seen)-1].Type, "the run's end came before the close")
	}
	_, live := e.hub.Lookup(sid)
	require.False(t, live, "the session's actor (and its run) are gone")
	require.Zero(t, e.count("runs", id))
	require.Zero(t, e.count("messages", id))
	_, err = e.provider.Connect(t.Context(), sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone, "the sandbox was killed")
	require.NoDirExists(t, filepath.Dir(e.provider.Workspace(sb.ID())), "and its workspace removed")
	require.NotContains(t, ids(e.all(alice, 10)), id)

	// A hello on the tombstone is refused like another user's session.
	c := wstest.Dial(t, e.wsURL, nil)
	c.Send(map[string]any{"type": "hello", "sessionId": id, "token": alice})
	f := c.Read()
	require.Equal(t, "error", f.Type)
	require.Equal(t, "not_found", f.Code)
	ce := closeOf(t, c)
	require.Equal(t, websocket.StatusCode(4004), ce.Code)
	require.Equal(t, "session deleted", ce.Reason)
	require.Zero(t, e.count("runs", id), "the hello wrote nothing")

	e.errorOf(e.do(http.MethodDelete, "/v1/sessions/"+id, alice, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.rename(alice, id, "back"), http.StatusNotFound, "not_found")
}

// A session whose actor is not in memory (its run waits for an approval, stored, while
// nobody holds it) is deleted from the database alone.
func TestDeleteWithoutAnActor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := t.Context()
	id := uuid.New()
	_, err := e.st.SessionCreate(ctx, chat.Session{ID: id, Owner: "alice", CreatedAt: e.clock.Now()})
	require.NoError(t, err)
	run := chat.Run{ID: uuid.New(), SessionID: id, RequestID: "r1", Status: chat.RunRunning, StartedAt: e.clock.Now(), LastActivityAt: e.clock.Now()}
	user := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, Position: 1, Role: chat.RoleUser, Content: "approve it", Status: chat.MessageComplete, CreatedAt: e.clock.Now()}
	require.NoError(t, e.st.RunStart(ctx, run, user, 0))
	run.Status = chat.RunAwaitingApproval
	require.NoError(t, e.st.RunUpdate(ctx, run, chat.RunRunning))
	sb, _, err := e.sandboxes.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "awaiting_approval", find(t, e.all(alice, 10), id.String()).ActiveRun.Status)
	_, live := e.hub.Lookup(id)
	require.False(t, live)

	r := e.do(http.MethodDelete, "/v1/sessions/"+id.String(), alice, nil)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	require.Zero(t, e.count("runs", id.String()))
	require.Zero(t, e.count("messages", id.String()))
	_, err = e.provider.Connect(ctx, sb.ID())
	require.ErrorIs(t, err, sandbox.ErrGone)
	require.NoDirExists(t, filepath.Dir(e.provider.Workspace(sb.ID())))
	require.Empty(t, e.all(alice, 10))
}

// Two chatd nodes on one database: a deletion on node A does not reach node B's actor,
// but node B cannot write to the session again. Its next run start finds the tombstone,
// and its tab is closed with 4004 "session deleted".
func TestDeleteOnAnotherNode(t *testing.T) {
	t.Parallel()
	nodeA := newEnv(t, nil)
	nodeB := newEnv(t, nodeA.st)
	c := nodeB.chat(alice, "hello from node B")
	id := c.State.SessionID

	r := nodeA.do(http.MethodDelete, "/v1/sessions/"+id, alice, nil)
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)

	c.Send(map[string]any{"type": "chat.send", "requestId": "r2", "content": "still there?"})
	ce := closeOf(t, c)
	require.Equal(t, websocket.StatusCode(4004), ce.Code)
	require.Equal(t, "session deleted", ce.Reason)
	require.Zero(t, nodeA.count("runs", id))
	require.Zero(t, nodeA.count("messages", id))
	_, live := nodeB.hub.Lookup(uuid.MustParse(id))
	require.False(t, live, "node B's actor let the session go")
}

// Another user's session is not found for every endpoint and never listed; a refused
// token is 401.
func TestAnotherUsersSessionIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.chat(alice, "mine")
	id := c.State.SessionID

	require.Empty(t, e.all(bob, 10))
	e.errorOf(e.rename(bob, id, "yours now"), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodDelete, "/v1/sessions/"+id, bob, nil), http.StatusNotFound, "not_found")

	s := find(t, e.all(alice, 10), id)
	require.Equal(t, "mine", s.Title, "bob changed nothing")
	require.Equal(t, 2, e.count("messages", id))
	require.Equal(t, "ack", c.Chat("r2", "still mine").Type, "bob deleted nothing")

	for _, auth := range []string{"", "Bearer wrong", "Basic " + alice} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/sessions", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		require.NoError(t, err)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%q: %s", auth, body)
		require.Equal(t, "Bearer", resp.Header.Get("WWW-Authenticate"))
		require.NoError(t, wstest.ValidateDefinition("HttpError", body))
	}
	for _, method := range []string{http.MethodPatch, http.MethodDelete} {
		e.errorOf(e.do(method, "/v1/sessions/"+id, "", []byte(`{"title":"x"}`)), http.StatusUnauthorized, "unauthorized")
	}
}

// A page of an allowed origin may call the API across origins (CORS): the preflight
// PATCH and DELETE need is answered, and the answers name the origin. Another origin
// gets no CORS headers, so its page can read nothing and send no PATCH or DELETE.
func TestCrossOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.chat(alice, "hello")
	id := c.State.SessionID

	call := func(method, origin string, header map[string]string) *http.Response {
		req, err := http.NewRequest(method, e.ts.URL+"/v1/sessions/"+id, nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "DELETE", "Access-Control-Request-Headers": "authorization"}

	resp := call(http.MethodOptions, "http://localhost:5173", preflight)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, resp.Header.Get("Access-Control-Allow-Methods"), "DELETE")
	require.Contains(t, strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization")
	require.Equal(t, "Origin", resp.Header.Get("Vary"))

	resp = call(http.MethodOptions, "http://evil.example", preflight)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	require.NotEqual(t, http.StatusNoContent, resp.StatusCode, "no preflight for another origin")

	list := func(origin string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, e.ts.URL+"/v1/sessions", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		req.Header.Set("Authorization", "Bearer "+alice)
		resp, err := e.ts.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	resp = list("http://localhost:5173")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))
	resp = list("http://evil.example")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))

	resp = call(http.MethodDelete, "http://localhost:5173", map[string]string{"Authorization": "Bearer " + alice})
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, "http://localhost:5173", resp.Header.Get("Access-Control-Allow-Origin"))
}
