package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport/wstest"
)

// wireRun is the part of a Run the tests read.
type wireRun struct {
	RunID           string `json:"runId"`
	RequestID       string `json:"requestId"`
	Status          string `json:"status"`
	Resumable       bool   `json:"resumable"`
	PendingApproval *struct {
		ToolCallID string `json:"toolCallId"`
		Name       string `json:"name"`
		InputHash  string `json:"inputHash"`
	} `json:"pendingApproval"`
}

type sendAnswer struct {
	SessionID string   `json:"sessionId"`
	RequestID string   `json:"requestId"`
	Run       *wireRun `json:"run"`
	Queued    bool     `json:"queued"`
}

// post sends a message over HTTP (to a new session when sessionID is "") and checks
// the answer against the schema.
func (e *env) post(token, sessionID, body string) (response, sendAnswer) {
	e.t.Helper()
	path := "/v1/sessions"
	if sessionID != "" {
		path += "/" + sessionID + "/messages"
	}
	e.clock.Advance(time.Second) // each run starts a second after the last
	r := e.do(http.MethodPost, path, token, []byte(body))
	var a sendAnswer
	if r.status == http.StatusAccepted {
		require.NoError(e.t, wstest.ValidateDefinition("SendAnswer", r.body), "%s", r.body)
		require.NoError(e.t, json.Unmarshal(r.body, &a))
	}
	return r, a
}

// getRun reads a run over HTTP.
func (e *env) getRun(token, sessionID, runID string) wireRun {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sessionID+"/runs/"+runID, token, nil)
	require.Equal(e.t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(e.t, wstest.ValidateDefinition("RunAnswer", r.body), "%s", r.body)
	var v struct{ Run wireRun }
	require.NoError(e.t, json.Unmarshal(r.body, &v))
	return v.Run
}

// pollRun polls a run over HTTP until its status is want, as a backend job would.
func (e *env) pollRun(token, sessionID, runID, want string) wireRun {
	e.t.Helper()
	var run wireRun
	require.Eventually(e.t, func() bool {
		run = e.getRun(token, sessionID, runID)
		return run.Status == want
	}, 10*time.Second, 5*time.Millisecond, "run %s never became %s", runID, want)
	return run
}

type runPage struct {
	Runs       []wireRun `json:"runs"`
	NextCursor *string   `json:"nextCursor"`
}

func (e *env) listRuns(token, sessionID, query string) runPage {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+sessionID+"/runs"+query, token, nil)
	require.Equal(e.t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(e.t, wstest.ValidateDefinition("RunPage", r.body), "%s", r.body)
	var p runPage
	require.NoError(e.t, json.Unmarshal(r.body, &p))
	return p
}

// A run started over HTTP, with no stream: the answer is at once, a WebSocket tab
// follows the run live, and polling the run over HTTP sees it through to its end,
// approvals included.
func TestRunsStartedAndPolledOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)

	// A new session, with its first message.
	r, first := e.post(alice, "", `{"requestId": "job-1", "content": "hello there"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.NotNil(t, first.Run)
	require.Equal(t, "job-1", first.Run.RequestID)
	require.Equal(t, "/v1/sessions/"+first.SessionID+"/runs/"+first.Run.RunID, r.header.Get("Location"))
	e.pollRun(alice, first.SessionID, first.Run.RunID, "done")
	again, repeat := e.post(alice, "", `{"requestId": "job-1", "content": "hello there"}`)
	require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
	require.Equal(t, first.SessionID, repeat.SessionID, "a retried start creates no second session")
	require.Equal(t, first.Run.RunID, repeat.Run.RunID, "nor a second run")
	require.Equal(t, "done", repeat.Run.Status)
	require.Len(t, e.all(alice, 10), 1)
	var page struct{ Messages []map[string]any }
	require.NoError(t, json.Unmarshal(e.do(http.MethodGet, "/v1/sessions/"+first.SessionID+"/messages", alice, nil).body, &page))
	require.Len(t, page.Messages, 2)
	require.Equal(t, "ok: hello there", page.Messages[1]["content"])

	// A tab follows a run started over HTTP, live.
	tab := e.tab(alice, first.SessionID)
	_, slow := e.post(alice, first.SessionID, `{"requestId": "job-2", "content": "wait for it"}`)
	require.NotNil(t, slow.Run)
	started := tab.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" })
	require.Equal(t, slow.Run.RunID, started.RunID)
	tab.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.Text != nil && *f.Text == "partial" })
	require.Equal(t, "running", e.getRun(alice, first.SessionID, slow.Run.RunID).Status)

	// While it runs: a message that must not wait is refused; one that queues is
	// queued, without a run yet.
	r, _ = e.post(alice, first.SessionID, `{"requestId": "job-3", "content": "now", "whileRunning": "reject"}`)
	e.errorOf(r, http.StatusConflict, "run_active")
	r, queued := e.post(alice, first.SessionID, `{"requestId": "job-4", "content": "after that", "whileRunning": "queue"}`)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.True(t, queued.Queued)
	require.Nil(t, queued.Run)

	require.NoError(t, e.gate.Pass(t.Context()))
	end := tab.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RunID == slow.Run.RunID })
	require.Equal(t, "chat.done", end.Type)
	e.pollRun(alice, first.SessionID, slow.Run.RunID, "done")
	tab.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "job-4" })

	// An approval: polled as awaiting_approval with what waits, decided in a tab.
	_, ask := e.post(alice, first.SessionID, `{"requestId": "job-5", "content": "approve this"}`)
	waiting := e.pollRun(alice, first.SessionID, ask.Run.RunID, "awaiting_approval")
	require.NotNil(t, waiting.PendingApproval)
	require.Equal(t, "shell", waiting.PendingApproval.Name)
	tab.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ask.Run.RunID, "toolCallId": waiting.PendingApproval.ToolCallID, "decision": "approve", "inputHash": waiting.PendingApproval.InputHash})
	require.Equal(t, "ack", tab.ReadReply("d1").Type)
	done := e.pollRun(alice, first.SessionID, ask.Run.RunID, "done")
	require.Nil(t, done.PendingApproval)

	// The session's runs, newest first, a page at a time, and by status.
	all := e.listRuns(alice, first.SessionID, "")
	require.Len(t, all.Runs, 4)
	require.Nil(t, all.NextCursor)
	var ids []string
	for _, run := range all.Runs {
		ids = append(ids, run.RequestID)
	}
	require.Equal(t, []string{"job-5", "job-4", "job-2", "job-1"}, ids)
	var paged []string
	cursor := ""
	for {
		p := e.listRuns(alice, first.SessionID, "?limit=1"+cursor)
		require.LessOrEqual(t, len(p.Runs), 1)
		for _, run := range p.Runs {
			paged = append(paged, run.RequestID)
		}
		if p.NextCursor == nil {
			break
		}
		cursor = "&cursor=" + *p.NextCursor
	}
	require.Equal(t, ids, paged)
	require.Empty(t, e.listRuns(alice, first.SessionID, "?status=running,awaiting_approval").Runs)
	require.Len(t, e.listRuns(alice, first.SessionID, "?status=done&status=error").Runs, 4)
}

// A run is its owner's: another user, an unknown run, a run of another session and bad
// input get clear errors, and a refused message creates nothing.
func TestRunsOverHTTPRefuse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	_, a := e.post(alice, "", `{"requestId": "a1", "content": "mine"}`)
	e.pollRun(alice, a.SessionID, a.Run.RunID, "done")
	_, other := e.post(alice, "", `{"requestId": "a2", "content": "another"}`)
	e.pollRun(alice, other.SessionID, other.Run.RunID, "done")

	runPath := "/v1/sessions/" + a.SessionID + "/runs/" + a.Run.RunID
	e.errorOf(e.do(http.MethodGet, runPath, bob, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs", bob, nil), http.StatusNotFound, "not_found")
	r, _ := e.post(bob, a.SessionID, `{"requestId": "b1", "content": "theirs"}`)
	e.errorOf(r, http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs/"+other.Run.RunID, alice, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs/not-a-run", alice, nil), http.StatusNotFound, "not_found")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs?status=finished", alice, nil), http.StatusBadRequest, "bad_request")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs?limit=0", alice, nil), http.StatusBadRequest, "bad_request")
	e.errorOf(e.do(http.MethodGet, "/v1/sessions/"+a.SessionID+"/runs?cursor=%21", alice, nil), http.StatusBadRequest, "bad_request")
	e.errorOf(e.do(http.MethodDelete, runPath, alice, nil), http.StatusMethodNotAllowed, "bad_request")

	for _, bad := range []struct {
		body   string
		status int
		code   string
	}{
		{`{"content": "no id"}`, http.StatusBadRequest, "bad_request"},
		{`{"requestId": "x1"}`, http.StatusBadRequest, "bad_request"},
		{`{"requestId": "x2", "content": "   "}`, http.StatusBadRequest, "bad_request"},
		{`{"requestId": "x3", "content": "hi", "whileRunning": "later"}`, http.StatusBadRequest, "bad_request"},
		{`[1, 2]`, http.StatusBadRequest, "bad_request"},
		{fmt.Sprintf(`{"requestId": "x4", "content": %q}`, strings.Repeat("x", 200<<10)), http.StatusRequestEntityTooLarge, "too_large"},
	} {
		r, _ := e.post(alice, "", bad.body)
		e.errorOf(r, bad.status, bad.code)
		r, _ = e.post(alice, a.SessionID, bad.body)
		e.errorOf(r, bad.status, bad.code)
	}
	require.Len(t, e.all(alice, 10), 2, "a refused message creates no session")
	require.Len(t, e.listRuns(alice, a.SessionID, "").Runs, 1, "nor a run")
}
