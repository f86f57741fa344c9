package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

type receivedWebhook struct {
	ID       string
	Status   int
	Verified bool
	Type     string
	RunID    string
	Error    string
}

// Webhooks are stored with the runs' changes and delivered at least once, signed: a
// receiver that verifies them with the Standard Webhooks reference library gets each
// event once, although chatd was killed after the runs ended and before any delivery
// went through, and a refused attempt is sent again with its id.
func TestWebhooksDeliveredOnceAcrossAKill(t *testing.T) {
	modules, err := filepath.Abs(filepath.Join("..", "web", "node_modules"))
	require.NoError(t, err)
	recv := startNodeAgent(t, filepath.Join("testdata", "webhook-receiver.mjs"), modules, webhookSecret)
	mode := func(status int) {
		resp, err := http.Post(fmt.Sprintf("%s/mode?status=%d", recv.base, status), "text/plain", nil)
		require.NoError(t, err)
		resp.Body.Close()
	}
	received := func() []receivedWebhook {
		resp, err := http.Get(recv.base + "/deliveries")
		require.NoError(t, err)
		defer resp.Body.Close()
		var v []receivedWebhook
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return v
	}
	mode(http.StatusServiceUnavailable)

	dbURL := storetest.NewURL(t)
	env := map[string]string{
		"DATABASE_URL": dbURL, "CHATD_WEBHOOK_URL": recv.base + "/hook", "CHATD_WEBHOOK_SECRET": webhookSecret,
		"CHATD_DEMO_WORDS": "40", "CHATD_DEMO_DELAY": "10ms",
	}
	proc := startChild(t, "chatd", env)
	c := wstest.Dial(t, proc.wsURL(), nil)
	c.Hello("")
	done := c.Chat("r1", "hello")
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	cancelled := c.Chat("r2", "hello again")
	c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RunID == cancelled.RunID })
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x1", "runId": cancelled.RunID})
	require.Equal(t, "chat.cancelled", c.ReadTerminal().Type)

	// Both events were tried and refused: chatd dies before any is delivered.
	require.Eventually(t, func() bool {
		ids := map[string]bool{}
		for _, d := range received() {
			ids[d.ID] = true
		}
		return len(ids) == 2
	}, 15*time.Second, 20*time.Millisecond)
	// ... and recorded as refused: killed between the receiver's answer and that record,
	// chatd would leave them claimed, for the next life to take only once the claim
	// expires (45 s), which is not what this test is about.
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), "SELECT count(*) FROM webhook_outbox WHERE locked_until IS NULL AND last_error IS NOT NULL").Scan(&n)
		return err == nil && n == 2
	}, 15*time.Second, 20*time.Millisecond)
	proc.signal(syscall.SIGKILL)
	proc.wait(15 * time.Second)
	mode(http.StatusOK)
	proc = restartChild(t, proc, "chatd (after kill -9)", env)

	require.Eventually(t, func() bool {
		n := 0
		for _, d := range received() {
			if d.Status == http.StatusOK {
				n++
			}
		}
		return n == 2
	}, 30*time.Second, 20*time.Millisecond, "both events delivered after the restart (the first retry is 5 s after the refusal)")
	all := received()
	delivered := map[string]receivedWebhook{}
	for _, d := range all {
		require.True(t, d.Verified, "every delivery verifies with the reference library: %+v", d)
		if d.Status == http.StatusOK {
			_, twice := delivered[d.ID]
			require.False(t, twice, "event %s delivered twice", d.ID)
			delivered[d.ID] = d
		}
	}
	types := map[string]string{}
	for id, d := range delivered {
		types[d.RunID] = d.Type
		refused := 0
		for _, other := range all {
			if other.ID == id && other.Status != http.StatusOK {
				refused++
			}
		}
		require.GreaterOrEqual(t, refused, 1, "the delivered attempt of %s is a retry with the refused one's id", id)
	}
	require.Equal(t, map[string]string{done.RunID: "run.completed", cancelled.RunID: "run.cancelled"}, types)

	// The admin listener and the metrics say so.
	resp, err := http.Get("http://" + proc.adminAddr() + "/webhooks")
	require.NoError(t, err)
	var status struct {
		Enabled                    bool
		Pending, Delivered, Failed int
		Undelivered                []map[string]any
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&status))
	resp.Body.Close()
	require.True(t, status.Enabled)
	require.Equal(t, 2, status.Delivered)
	require.Zero(t, status.Pending)
	require.Empty(t, status.Undelivered)
	resp, err = http.Get("http://" + proc.adminAddr() + "/metrics")
	require.NoError(t, err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(metrics), `chatd_webhook_events{state="delivered"} 2`)
	require.True(t, strings.Contains(string(metrics), `chatd_webhook_attempts_total{result="delivered"} 2`), "this node delivered both")
}
