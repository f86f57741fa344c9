package server

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/store/storetest"
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
	require.NoError(t, m.Shutdown(ctx), "the stream does not hold the shutdown up")
	for lines.Scan() {
		require.NotContains(t, lines.Text(), `"type":"finish"`, "the run did not end")
	}
	// The response was aborted, not ended: the SDK sees a broken stream (never a finished
	// answer) and the client resumes elsewhere.
	require.Error(t, lines.Err(), "the stream ends broken")
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

// Branches over the AI SDK on two nodes: a regenerate-message and a branch switch sent to
// the node that does not hold the chat act on the actor of the one that does (relayed,
// as stop and approve are), and the transcript either node answers shows the branch
// point and the branch selected.
func TestAISDKBranchesRelayed(t *testing.T) {
	dbURL := storetest.NewURL(t)
	env := func() map[string]string {
		return map[string]string{
			"DATABASE_URL":      dbURL,
			"CHATD_DEMO_DELAY":  "1ms",
			"CHATD_DEMO_WORDS":  "8",
			"CHATD_SANDBOX_DIR": sandboxDir(t),
		}
	}
	a, _ := startNode(t, "chatd A", env())
	b, bAdmin := startNode(t, "chatd B", env())
	// stream POSTs a body to a node's /v1/aisdk/chat and returns the run its stream
	// carried, read to the end.
	stream := func(addr, body string) string {
		t.Helper()
		resp, err := http.Post("http://"+addr+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		all, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", all)
		require.Contains(t, string(all), `"type":"finish"`)
		var start struct{ MessageID string }
		first, _, _ := strings.Cut(strings.TrimPrefix(string(all), "data: "), "\n")
		require.NoError(t, json.Unmarshal([]byte(first), &start), "%s", all)
		return start.MessageID
	}
	type uiMessage struct {
		ID       string
		Role     string
		Metadata *struct {
			Chatd struct {
				Branch struct {
					Index, Count int
					Siblings     []string
				}
			}
		}
	}
	transcript := func(status int, body string) []uiMessage {
		t.Helper()
		require.Equal(t, http.StatusOK, status, body)
		var tr struct{ Messages []uiMessage }
		require.NoError(t, json.Unmarshal([]byte(body), &tr), body)
		return tr.Messages
	}
	ids := func(msgs []uiMessage) []string {
		var out []string
		for _, m := range msgs {
			out = append(out, m.ID)
		}
		return out
	}

	user := `{"id":"u1","role":"user","parts":[{"type":"text","text":"one"}]}`
	run1 := stream(a.addr, `{"id":"relay-branches","trigger":"submit-message","messages":[`+user+`]}`)
	run2 := stream(b.addr, `{"id":"relay-branches","trigger":"regenerate-message","messageId":"`+run1+`","messages":[`+user+`]}`)
	require.NotEqual(t, run1, run2)

	msgs := transcript(apiAt(t, http.MethodGet, b.addr, "/v1/aisdk/chat/relay-branches", ""))
	require.Equal(t, []string{"u1", run2}, ids(msgs))
	require.NotNil(t, msgs[1].Metadata)
	br := msgs[1].Metadata.Chatd.Branch
	require.Equal(t, []int{1, 2}, []int{br.Index, br.Count})

	// The switch, sent to B: A's actor selects the branch; the answer is the transcript.
	msgs = transcript(apiAt(t, http.MethodPost, b.addr, "/v1/aisdk/chat/relay-branches/branch", `{"messageId":"`+br.Siblings[0]+`"}`))
	require.Equal(t, []string{"u1", run1}, ids(msgs))
	require.Equal(t, 0, msgs[1].Metadata.Chatd.Branch.Index)
	require.Equal(t, []string{"u1", run1}, ids(transcript(apiAt(t, http.MethodGet, a.addr, "/v1/aisdk/chat/relay-branches", ""))))
	require.Equal(t, 2.0, scrapeAt(t, bAdmin).value(t, "chatd_relayed_requests_total"), "both went to A")

	// UIMessage ids name messages too: an answer's (its run) and a question's.
	require.Equal(t, []string{"u1", run2}, ids(transcript(apiAt(t, http.MethodPost, b.addr, "/v1/aisdk/chat/relay-branches/branch", `{"messageId":"`+run2+`"}`))))
	require.Equal(t, []string{"u1", run1}, ids(transcript(apiAt(t, http.MethodPost, a.addr, "/v1/aisdk/chat/relay-branches/branch", `{"messageId":"`+run1+`"}`))))
	require.Equal(t, []string{"u1", run2}, ids(transcript(apiAt(t, http.MethodPost, a.addr, "/v1/aisdk/chat/relay-branches/branch", `{"messageId":"u1"}`))),
		"a question: below it the branch written last")
	status, body := apiAt(t, http.MethodPost, b.addr, "/v1/aisdk/chat/relay-branches/branch", `{"messageId":"u2"}`)
	require.Equal(t, http.StatusNotFound, status, "no message of the chat: %s", body)
	require.Contains(t, body, `"not_found"`)

	// An edit whose new text comes with an id of its own (assistant-ui's) keeps that id.
	edited := `{"id":"u1-edited","role":"user","parts":[{"type":"text","text":"one, edited"}]}`
	run3 := stream(b.addr, `{"id":"relay-branches","trigger":"submit-message","messageId":"u1","messages":[`+edited+`]}`)
	require.Equal(t, []string{"u1-edited", run3}, ids(transcript(apiAt(t, http.MethodGet, a.addr, "/v1/aisdk/chat/relay-branches", ""))))

	// ?tree=1: every branch, parents first, alternatives in the order they were written,
	// headId the end of the branch shown.
	status, body = apiAt(t, http.MethodGet, b.addr, "/v1/aisdk/chat/relay-branches?tree=1", "")
	require.Equal(t, http.StatusOK, status, body)
	var tr struct {
		Messages []uiMessage
		Tree     struct {
			HeadID   *string
			Messages []struct {
				ParentID *string
				Message  uiMessage
			}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &tr), body)
	require.Equal(t, []string{"u1-edited", run3}, ids(tr.Messages))
	require.NotNil(t, tr.Tree.HeadID)
	require.Equal(t, run3, *tr.Tree.HeadID)
	var edges []string
	for _, it := range tr.Tree.Messages {
		p := "-"
		if it.ParentID != nil {
			p = *it.ParentID
		}
		edges = append(edges, p+">"+it.Message.ID)
	}
	require.Equal(t, []string{"->u1", "u1>" + run1, "u1>" + run2, "->u1-edited", "u1-edited>" + run3}, edges)
}

// The events feed of a chat tells a page that shows it what another tab or device does:
// its state, a run started elsewhere, the run's end, a branch selected; a shutdown aborts
// it (the client opens it again), as it does the streams.
func TestAISDKEventsFeed(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms", "CHATD_SHUTDOWN_TIMEOUT": "10s"})
	base := "http://" + m.Addr() + "/v1/aisdk/chat/"
	post := func(body string) {
		t.Helper()
		resp, err := http.Post(base[:len(base)-1], "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	resp, err := http.Get(base + "feed-chat/events")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "an unknown chat")

	post(`{"id":"feed-chat","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"hello"}]}]}`)
	resp, err = http.Get(base + "feed-chat/events")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	lines := bufio.NewScanner(resp.Body)
	next := func() map[string]any {
		t.Helper()
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, "data: ") {
				var v map[string]any
				require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &v))
				return v
			}
		}
		t.Fatalf("the feed ended: %v", lines.Err())
		return nil
	}
	require.Equal(t, map[string]any{"type": "state", "activeRunId": nil}, next())

	// Another client sends: the feed says the run started, then that it ended.
	post(`{"id":"feed-chat","trigger":"submit-message","messages":[{"id":"u2","role":"user","parts":[{"type":"text","text":"again"}]}]}`)
	started := next()
	require.Equal(t, "run-started", started["type"])
	ended := next()
	require.Equal(t, map[string]any{"type": "run-ended", "runId": started["runId"], "status": "done"}, ended)

	// A regeneration of the first answer changes the branch, and runs.
	var transcript struct {
		Messages []struct {
			ID   string `json:"id"`
			Role string `json:"role"`
		} `json:"messages"`
	}
	tr, err := http.Get(base + "feed-chat")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(tr.Body).Decode(&transcript))
	tr.Body.Close()
	post(`{"id":"feed-chat","trigger":"regenerate-message","messageId":"` + transcript.Messages[1].ID + `","messages":[]}`)
	require.Equal(t, "branch-changed", next()["type"])
	require.Equal(t, "run-started", next()["type"])
	require.Equal(t, "run-ended", next()["type"])

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	require.NoError(t, m.Shutdown(ctx), "the feed does not hold the shutdown up")
	for lines.Scan() {
	}
	require.Error(t, lines.Err(), "the feed is aborted, not ended")
}

// A graceful restart mid-reply: the stream of the stopped server is aborted (never a
// finish), the restarted one continues the run, and a resumed stream assembles one text
// part that equals the stored transcript: the parts an uninterrupted run would have.
func TestAISDKRestartMidReplyIsOnePart(t *testing.T) {
	dbURL := storetest.NewURL(t)
	env := map[string]string{"DATABASE_URL": dbURL, "CHATD_DEMO_DELAY": "4ms", "CHATD_DEMO_WORDS": "150", "CHATD_SHUTDOWN_TIMEOUT": "10s",
		"CHATD_LOG_FORMAT": "json", "CHATD_SANDBOX_DIR": t.TempDir()}
	var logBuf syncBuffer
	cfg, err := ConfigFromEnv([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, envMap(env), &logBuf)
	require.NoError(t, err)
	logger, err := newLogger(cfg, &logBuf)
	require.NoError(t, err)
	first := newServer(cfg, logger)
	runCtx, cancelRun := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelRun()
	require.NoError(t, first.Start(runCtx))

	body := `{"id":"restart-chat","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"tell me a long story"}]}]}`
	resp, err := http.Post("http://"+first.Addr()+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	deltas := 0
	for deltas < 5 && lines.Scan() {
		if strings.Contains(lines.Text(), `"type":"text-delta"`) {
			deltas++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	for lines.Scan() {
		require.NotContains(t, lines.Text(), `"type":"finish"`)
	}
	require.Error(t, lines.Err(), "the stopped server's stream is aborted")

	second, _ := startInProcess(t, env)
	stream, err := http.Get("http://" + second.Addr() + "/v1/aisdk/chat/restart-chat/stream")
	require.NoError(t, err)
	defer stream.Body.Close()
	require.Equal(t, http.StatusOK, stream.StatusCode)
	texts := map[string]*strings.Builder{}
	var order []string
	finished := false
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
		l, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || l == "[DONE]" {
			continue
		}
		var c map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &c))
		switch c["type"] {
		case "text-start":
			id := c["id"].(string)
			require.NotContains(t, texts, id, "a part started twice")
			texts[id] = &strings.Builder{}
			order = append(order, id)
		case "text-delta":
			texts[c["id"].(string)].WriteString(c["delta"].(string))
		case "finish":
			finished = true
		}
	}
	require.True(t, finished)
	require.Len(t, order, 1, "one text part across the restart")

	var transcript struct {
		Messages []struct {
			Role  string           `json:"role"`
			Parts []map[string]any `json:"parts"`
		} `json:"messages"`
	}
	tr, err := http.Get("http://" + second.Addr() + "/v1/aisdk/chat/restart-chat")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(tr.Body).Decode(&transcript))
	tr.Body.Close()
	require.Len(t, transcript.Messages, 2)
	var stored []string
	for _, p := range transcript.Messages[1].Parts {
		if p["type"] == "text" {
			stored = append(stored, p["text"].(string))
		}
	}
	require.Equal(t, []string{texts[order[0]].String()}, stored, "the stream's text is the transcript's, word for word")
	var segments int
	require.NoError(t, openStore(t, dbURL).Pool().QueryRow(dbCtx(t),
		"SELECT count(*) FROM messages WHERE role = 'assistant' AND content <> ''").Scan(&segments))
	require.Equal(t, 2, segments, "stored as two segments, the interrupted one and its continuation")
}

// A stream whose run is quiet (a call waiting for approval) and an idle events feed send
// a comment line every 15 s of the server's clock: proxies do not time them out, and
// ChatdChatTransport tells a live connection from a dead one. The SDK's parser skips it.
func TestAISDKStreamsPingWhileQuiet(t *testing.T) {
	clock := clockwork.NewFakeClockAt(time.Now())
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "1ms"}, func(m *Server) { m.clock = clock })
	base := "http://" + m.Addr() + "/v1/aisdk/chat"
	// A missing ping fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base, strings.NewReader(
		`{"id":"quiet","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"please approve a command"}]}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	stream := bufio.NewScanner(resp.Body)
	until := func(s *bufio.Scanner, what string) []string {
		t.Helper()
		var seen []string
		for s.Scan() {
			seen = append(seen, s.Text())
			if strings.Contains(s.Text(), what) {
				return seen
			}
		}
		t.Fatalf("ended before %q: %v\n%s", what, s.Err(), strings.Join(seen, "\n"))
		return nil
	}
	before := until(stream, `"type":"tool-approval-request"`)
	for _, l := range before {
		require.NotEqual(t, ": ping", l, "no ping before 15 s")
	}

	freq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/quiet/events", nil)
	require.NoError(t, err)
	feed, err := http.DefaultClient.Do(freq)
	require.NoError(t, err)
	defer feed.Body.Close()
	events := bufio.NewScanner(feed.Body)
	until(events, `"type":"state"`)

	// The run waits for a person: nothing to send but the pings.
	clock.Advance(15 * time.Second)
	require.Equal(t, []string{"", ": ping"}, until(stream, ": ping"), "right after the approval request's blank line")
	until(events, ": ping")
	clock.Advance(15 * time.Second)
	require.Equal(t, []string{"", ": ping"}, until(stream, ": ping"))

	// And the run goes on when it is decided.
	ok, err := http.Post(base+"/quiet/approve", "application/json", strings.NewReader(`{"toolCallId":"demo-approval","approved":true}`))
	require.NoError(t, err)
	ok.Body.Close()
	require.Equal(t, http.StatusOK, ok.StatusCode)
	until(stream, `"type":"finish"`)
}
