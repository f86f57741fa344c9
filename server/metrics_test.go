package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport/wstest"
)

// httpGet fetches path from chatd's public listener and returns the status and body.
func httpGet(t *testing.T, m *Server, path string) (int, string) {
	t.Helper()
	return getAt(t, m.Addr(), path)
}

// adminGet fetches path from chatd's admin listener and returns the status and body.
func adminGet(t *testing.T, m *Server, path string) (int, string) {
	t.Helper()
	require.NotEmpty(t, m.AdminAddr(), "chatd has no admin listener")
	return getAt(t, m.AdminAddr(), path)
}

// getAt fetches path from addr and returns the status and body.
func getAt(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	require.NoError(t, err)
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// scrape is one GET /metrics on the admin listener, parsed.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, m *Server) scrape {
	t.Helper()
	return scrapeAt(t, m.AdminAddr())
}

// scrapeAt is scrapeMetrics of the admin listener at addr.
func scrapeAt(t *testing.T, addr string) scrape {
	t.Helper()
	status, body := getAt(t, addr, "/metrics")
	require.Equal(t, http.StatusOK, status, body)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err)
	return families
}

// series returns the sample of name whose labels include labels (name, value pairs),
// failing the test when there is none.
func (s scrape) series(t *testing.T, name string, labels ...string) *dto.Metric {
	t.Helper()
	f, ok := s[name]
	require.True(t, ok, "%s is not served", name)
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		return m
	}
	t.Fatalf("%s has no series %v", name, labels)
	return nil
}

// value is a counter's or gauge's value.
func (s scrape) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	m := s.series(t, name, labels...)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	t.Fatalf("%s is not a counter or a gauge", name)
	return 0
}

// count is a histogram's sample count.
func (s scrape) count(t *testing.T, name string, labels ...string) uint64 {
	t.Helper()
	h := s.series(t, name, labels...).GetHistogram()
	require.NotNil(t, h, "%s is not a histogram", name)
	return h.GetSampleCount()
}

// at returns a state for a client that says it has seen the session up to seq of epoch.
func at(sessionID, epoch string, seq int64) *wstest.State {
	s := wstest.NewState()
	s.SessionID, s.Epoch, s.LastSeq = sessionID, epoch, seq
	return s
}

// settle makes a round trip on c: once the reply is read, every frame the server wrote
// to c before it has been counted (the writer counts a batch before it takes the next).
func settle(t *testing.T, c *wstest.Client, requestID string) {
	t.Helper()
	c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": requestID})
	require.Equal(t, "error", c.ReadReply(requestID).Type)
}

// A conversation over real WebSockets, then GET /metrics: every series the issue lists
// is served, with the values the conversation implies.
func TestMetricsEndpoint(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "0s", "CHATD_DEMO_WORDS": "5"})
	url := "ws://" + m.Addr() + "/v1/ws"

	// A new session, caught up with a snapshot; one run.
	c1 := wstest.Dial(t, url, nil)
	require.Equal(t, "snapshot", c1.Hello("").Type)
	sessionID, epoch := c1.State.SessionID, c1.State.Epoch
	require.Equal(t, "ack", c1.Chat("r1", "hello").Type)
	require.Equal(t, "chat.done", c1.ReadTerminal().Type)

	// A tab that comes back where it left off is caught up by replay; it runs another.
	c2 := wstest.Dial(t, url, nil)
	c2.State = at(sessionID, epoch, c1.State.LastSeq)
	require.Equal(t, "resumed", c2.Hello(sessionID).Type)
	require.Equal(t, "ack", c2.Chat("r2", "hello again").Type)
	require.Equal(t, "chat.done", c2.ReadTerminal().Type)

	// One from an earlier epoch (a restarted server, say) gets a snapshot.
	c3 := wstest.Dial(t, url, nil)
	c3.State = at(sessionID, "0123456789abcdef", 1)
	require.Equal(t, "snapshot", c3.Hello(sessionID).Type)

	c1.ReadToSeq(c2.State.LastSeq)
	lastSeq := c2.State.LastSeq
	require.Equal(t, lastSeq, c1.State.LastSeq)
	for i, c := range []*wstest.Client{c1, c2, c3} {
		settle(t, c, fmt.Sprint("settle-", i))
	}
	// Every frame the clients read: catch-ups, events, acks, the settling replies.
	read := (1 + 1 + len(c1.Seen) + 1) + (1 + 1 + len(c2.Seen) + 1) + (1 + len(c3.Seen) + 1)

	s := scrapeMetrics(t, m)

	require.EqualValues(t, 3, s.value(t, "chatd_connections_open"))
	require.GreaterOrEqual(t, s.value(t, "chatd_actors_live"), 1.0)
	for _, status := range []string{"running", "awaiting_approval", "paused"} {
		require.Zero(t, s.value(t, "chatd_runs_active", "status", status), status)
	}
	require.EqualValues(t, lastSeq, s.value(t, "chatd_events_published_total"), "one session: one count per seq")
	frames := s.value(t, "chatd_frames_sent_total")
	require.GreaterOrEqual(t, frames, float64(read-3), "the settling replies may not be counted yet")
	require.LessOrEqual(t, frames, float64(read), "nothing was sent that the clients did not read")
	require.Zero(t, s.value(t, "chatd_slow_consumer_drops_total"))
	// Frames the sockets took at once were written by the actor and the workers
	// themselves (through the listener's connection limit): a writer goroutine was
	// started for each catch-up, not for each event.
	require.LessOrEqual(t, s.value(t, "chatd_writers_started_total"), 6.0, "of %v frames", frames)
	require.EqualValues(t, 1, s.value(t, "chatd_catchups_total", "kind", "replay"))
	require.EqualValues(t, 2, s.value(t, "chatd_catchups_total", "kind", "snapshot"))
	require.Zero(t, s.value(t, "chatd_ring_evictions_total"))

	for _, stmt := range []string{"RunStart", "MessageInsert", "MessageUpdate", "RunUpdate", "SessionInsert", "SessionOpen"} {
		require.NotZero(t, s.count(t, "chatd_db_statement_duration_seconds", "statement", stmt), stmt)
		require.Zero(t, s.value(t, "chatd_db_statement_errors_total", "statement", stmt), stmt)
	}
	// Migrations ran on the pool too.
	require.NotZero(t, s.count(t, "chatd_db_statement_duration_seconds", "statement", "other"))
	for name := range s {
		if name != "chatd_db_statement_duration_seconds" && name != "chatd_db_statement_errors_total" {
			continue
		}
		require.LessOrEqual(t, len(s[name].GetMetric()), 20, "the statement label is bounded by chatd's queries")
	}

	require.EqualValues(t, 2, s.count(t, "chatd_run_duration_seconds", "status", "done"))
	require.GreaterOrEqual(t, s.count(t, "chatd_model_first_token_seconds"), uint64(2), "a model call per run at least")

	// The runtime's and the process's own.
	require.NotZero(t, s.value(t, "go_goroutines"))
	require.NotZero(t, s.value(t, "process_resident_memory_bytes"))

	// pprof is off unless asked for; the other endpoints are unaffected.
	status, _ := adminGet(t, m, "/debug/pprof/")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = adminGet(t, m, "/healthz")
	require.Equal(t, http.StatusOK, status)
}

// The database pool's statistics are served, read from the pool at each scrape.
func TestMetricsDatabasePool(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "0s", "CHATD_DEMO_WORDS": "5"})
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	require.Equal(t, "snapshot", c.Hello("").Type)
	require.Equal(t, "ack", c.Chat("r1", "hello").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)

	s := scrapeMetrics(t, m)
	acquired := s.value(t, "chatd_db_pool_connections", "state", "acquired")
	idle := s.value(t, "chatd_db_pool_connections", "state", "idle")
	total := s.value(t, "chatd_db_pool_connections", "state", "total")
	require.GreaterOrEqual(t, total, 1.0, "the conversation's connections stay in the pool")
	require.GreaterOrEqual(t, acquired, 0.0)
	require.GreaterOrEqual(t, idle, 0.0)
	require.LessOrEqual(t, acquired+idle, total)
	require.EqualValues(t, 16, s.value(t, "chatd_db_pool_max_connections"), "chatd's default, the URL sets none")
	require.LessOrEqual(t, total, 16.0)

	acquires := s.value(t, "chatd_db_pool_acquires_total")
	// Migrations, the start-up sweep, the session, the run's writes: each takes one.
	require.GreaterOrEqual(t, acquires, 5.0)
	waits := s.value(t, "chatd_db_pool_acquire_waits_total")
	require.LessOrEqual(t, waits, acquires)
	require.GreaterOrEqual(t, waits, 1.0, "the first acquire waited for the first connection")
	waited := s.value(t, "chatd_db_pool_acquire_wait_seconds_total")
	require.Greater(t, waited, 0.0)
	require.Less(t, waited, 60.0)

	// The values are the pool's now, not a sample from before: /readyz pings the database.
	status, _ := httpGet(t, m, "/readyz")
	require.Equal(t, http.StatusOK, status)
	require.Greater(t, scrapeMetrics(t, m).value(t, "chatd_db_pool_acquires_total"), acquires)
}

// With CHATD_PPROF=on the profiles are served next to /metrics, on the admin listener
// only.
func TestPprofOn(t *testing.T) {
	m, logBuf := startInProcess(t, map[string]string{"CHATD_PPROF": "on"})
	require.Contains(t, logBuf.String(), `"pprof":true`)
	status, body := adminGet(t, m, "/debug/pprof/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "goroutine")
	status, body = adminGet(t, m, "/debug/pprof/goroutine?debug=1")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "goroutine profile")
	status, _ = adminGet(t, m, "/debug/pprof/cmdline")
	require.Equal(t, http.StatusOK, status)
	status, _ = adminGet(t, m, "/metrics")
	require.Equal(t, http.StatusOK, status)
}

// The public listener serves the API, the WebSocket and the app, and neither metrics nor
// profiles; the admin listener serves those and nothing of the public one's but its
// probes. Both answer /healthz and /readyz. The log tells the admin listener's bound
// address, as it does the public one's.
func TestAdminListener(t *testing.T) {
	m, logBuf := startInProcess(t, map[string]string{"CHATD_PPROF": "on"})
	require.NotEqual(t, m.Addr(), m.AdminAddr())
	require.Contains(t, logBuf.String(), `"admin_addr":"`+m.AdminAddr()+`"`)
	require.Contains(t, logBuf.String(), "metrics at http://"+m.AdminAddr()+"/metrics")

	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		status, body := httpGet(t, m, path)
		require.Equal(t, http.StatusNotFound, status, "public %s", path)
		require.NotContains(t, body, "go_goroutines", path)
		status, _ = adminGet(t, m, path)
		require.Equal(t, http.StatusOK, status, "admin %s", path)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		status, _ := httpGet(t, m, path)
		require.Equal(t, http.StatusOK, status, "public %s", path)
		status, _ = adminGet(t, m, path)
		require.Equal(t, http.StatusOK, status, "admin %s", path)
	}
	// Neither the app, the API nor the WebSocket on the admin listener.
	for _, path := range []string{"/", "/app.js", "/v1/sessions", "/v1/ws"} {
		status, _ := adminGet(t, m, path)
		require.Equal(t, http.StatusNotFound, status, "admin %s", path)
	}
	status, _ := httpGet(t, m, "/")
	require.Equal(t, http.StatusOK, status)

	// The WebSocket works on the public listener.
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	require.Equal(t, "snapshot", c.Hello("").Type)
}

// CHATD_ADMIN_ADDR=off runs no admin listener; the public one still serves no metrics.
func TestAdminListenerOff(t *testing.T) {
	m, logBuf := startInProcess(t, map[string]string{"CHATD_ADMIN_ADDR": "off"})
	require.Empty(t, m.AdminAddr())
	require.Contains(t, logBuf.String(), `"admin_addr":"off"`)
	status, _ := httpGet(t, m, "/metrics")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = httpGet(t, m, "/healthz")
	require.Equal(t, http.StatusOK, status)
}

// chatd serves the app at / beside its own endpoints, which keep their answers.
func TestServesTheApp(t *testing.T) {
	m, _ := startInProcess(t, nil)
	status, body := httpGet(t, m, "/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<script type="module" src="/app.js"></script>`)
	status, _ = httpGet(t, m, "/manifest.webmanifest")
	require.Equal(t, http.StatusOK, status)
	status, body = httpGet(t, m, "/v1/nope")
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "404 page not found\n", body)
	status, _ = adminGet(t, m, "/metrics")
	require.Equal(t, http.StatusOK, status)
}

// The limits' variables reach the servers, and /metrics counts their refusals: a command
// over CHATD_COMMAND_RATE is answered rate_limited, an upgrade over CHATD_HANDSHAKE_BURST
// is answered 429, a connection over CHATD_MAX_CONNS_PER_ADDR is answered 429 by the
// listener.
func TestLimitsSettingsAndMetrics(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{
		"CHATD_COMMAND_RATE":       "1/h",
		"CHATD_COMMAND_BURST":      "2",
		"CHATD_MAX_CONNS_PER_ADDR": "3",
		"CHATD_HANDSHAKE_RATE":     "1/h",
		"CHATD_HANDSHAKE_BURST":    "2",
	})
	url := "ws://" + m.Addr() + "/v1/ws"
	c := wstest.Dial(t, url, nil)
	c.Hello("")
	c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "u"})
	require.Equal(t, "unknown_type", c.ReadReply("u").Code)
	c.SendUnchecked(map[string]any{"type": "no-such-type", "requestId": "over"})
	require.Equal(t, "rate_limited", c.ReadReply("over").Code)

	// The second upgrade takes the last token; the third finds none.
	wstest.Dial(t, url, nil)
	_, err := wstest.TryDial(t, url, nil)
	require.ErrorContains(t, err, "429")

	// Three connections of another address are held; its fourth is refused at once.
	for range 3 {
		dialFrom(t, "127.0.0.3", m.Addr())
	}
	require.Equal(t, http.StatusTooManyRequests, refusedStatus(t, dialFrom(t, "127.0.0.3", m.Addr())))

	s := scrapeMetrics(t, m)
	for limit, want := range map[string]float64{"command": 1, "addr_conns": 1, "handshake": 1, "user_conns": 0} {
		require.Equal(t, want, s.series(t, "chatd_rate_limited_total", "limit", limit).GetCounter().GetValue(), limit)
	}
}
