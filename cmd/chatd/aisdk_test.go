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

// A POST while the chat's run is active follows the policy: under reject (the default)
// it is 409 run_active; with whileRunning "interrupt" in the body the active run ends
// cancelled (its stream ends) and the POST streams the new run; an unknown policy is 400.
func TestAISDKPostDuringARun(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms"})
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
