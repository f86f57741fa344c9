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
