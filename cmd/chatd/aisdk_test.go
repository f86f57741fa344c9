package main

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A shutdown ends the AI SDK's open streams instead of waiting for them: a stream whose
// run waits for an approval would otherwise hold the HTTP server's Shutdown until its
// deadline, and every service after it would stop with no time left. The run is left for
// the next process (suspended), as a WebSocket tab's is.
func TestShutdownEndsAISDKStreams(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms", "CHATD_SHUTDOWN_TIMEOUT": "10s"})
	body := `{"id":"shutdown-chat","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"please approve the sandbox call"}]}]}`
	resp, err := http.Post("http://"+m.Addr()+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"tool-approval-request"`) {
			break // the run waits for a person, and the stream with it
		}
	}
	require.NoError(t, lines.Err())

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	require.NoError(t, m.Close(ctx), "the stream does not hold the shutdown up")
	for lines.Scan() {
	}
	// The stream ended (EOF, or the connection cut): the client resumes elsewhere.
	var reason string
	require.NoError(t, openStore(t, m.cfg.DatabaseURL).Pool().QueryRow(dbCtx(t),
		"SELECT cancel_reason FROM runs WHERE status IN ('running', 'awaiting_approval', 'paused')").Scan(&reason))
	require.Equal(t, "shutdown", reason, "suspended for the next process")
}

// A POST while the chat's run is active follows the policy: under reject
// (CHATD_DOUBLE_TEXT here) it is 409 run_active; with whileRunning "interrupt" in the body
// the active run ends cancelled (its stream ends) and the POST streams the new run; an
// unknown policy is 400.
func TestAISDKPostDuringARun(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms", "CHATD_DOUBLE_TEXT": "reject"})
	post := func(body string) *http.Response {
		resp, err := http.Post("http://"+m.Addr()+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	user := func(id, text, extra string) string {
		return `{"id":"midrun-chat","trigger":"submit-message"` + extra + `,"messages":[{"id":"` + id + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
	}
	first := post(user("u1", "please approve the sandbox call", ""))
	require.Equal(t, http.StatusOK, first.StatusCode)
	lines := bufio.NewScanner(first.Body)
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"tool-approval-request"`) {
			break // the run waits for a person: it stays active
		}
	}
	require.NoError(t, lines.Err())

	require.Equal(t, http.StatusConflict, post(user("u2", "hello", "")).StatusCode)
	require.Equal(t, http.StatusConflict, post(user("u2", "hello", `,"whileRunning":"reject"`)).StatusCode)
	require.Equal(t, http.StatusBadRequest, post(user("u2", "hello", `,"whileRunning":"later"`)).StatusCode)

	second := post(user("u2", "hello", `,"whileRunning":"interrupt"`))
	require.Equal(t, http.StatusOK, second.StatusCode)
	for lines.Scan() {
	}
	var all strings.Builder
	next := bufio.NewScanner(second.Body)
	for next.Scan() {
		all.WriteString(next.Text() + "\n")
	}
	require.Contains(t, all.String(), `"type":"finish"`, "the POST streams the new run to its end")
	require.NotContains(t, all.String(), `"tool-approval-request"`, "and not the interrupted one")

	st := openStore(t, m.cfg.DatabaseURL)
	var status, reason string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t),
		"SELECT status, cancel_reason FROM runs WHERE request_id = 'u1'").Scan(&status, &reason))
	require.Equal(t, []string{"cancelled", "new_message"}, []string{status, reason})
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT status FROM runs WHERE request_id = 'u2'").Scan(&status))
	require.Equal(t, "done", status)
}

// Under queue (the default) a POST during a run is stored as queued at once: its stream
// is the run the message starts once the active one ended, from that run's start.
func TestAISDKPostDuringARunIsQueued(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms"})
	post := func(body string) *http.Response {
		resp, err := http.Post("http://"+m.Addr()+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	user := func(id, text string) string {
		return `{"id":"queued-chat","trigger":"submit-message","messages":[{"id":"` + id + `","role":"user","parts":[{"type":"text","text":"` + text + `"}]}]}`
	}
	first := post(user("u1", "please approve the sandbox call"))
	require.Equal(t, http.StatusOK, first.StatusCode)
	lines := bufio.NewScanner(first.Body)
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"tool-approval-request"`) {
			break
		}
	}
	require.NoError(t, lines.Err())

	second := post(user("u2", "hello"))
	require.Equal(t, http.StatusOK, second.StatusCode)
	st := openStore(t, m.cfg.DatabaseURL)
	var queued string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT content FROM queued_messages WHERE request_id = 'u2'").Scan(&queued))
	require.Equal(t, "hello", queued, "stored as queued at once")

	// The active run ends (stopped): the queued message starts its run, and the second
	// POST's stream carries it to its end.
	stop, err := http.Post("http://"+m.Addr()+"/v1/aisdk/chat/queued-chat/stop", "application/json", nil)
	require.NoError(t, err)
	stop.Body.Close()
	require.Equal(t, http.StatusOK, stop.StatusCode)
	var all strings.Builder
	next := bufio.NewScanner(second.Body)
	for next.Scan() {
		all.WriteString(next.Text() + "\n")
	}
	var runID, status string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT id::text, status FROM runs WHERE request_id = 'u2'").Scan(&runID, &status))
	require.Equal(t, "done", status)
	require.Contains(t, all.String(), `"messageId":"`+runID+`"`, "the stream is the queued message's run")
	require.Contains(t, all.String(), `"type":"finish"`)
	require.NotContains(t, all.String(), `"tool-approval-request"`, "and not the stopped one")
	var n int
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT count(*) FROM queued_messages").Scan(&n))
	require.Zero(t, n)
}
