package agui

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is testdata/server.mjs, a scripted AG-UI agent made of the official npm
// packages (@ag-ui/core, @ag-ui/encoder, pinned in web/package.json), in a node process
// of its own for the test.
type server struct {
	URL string
}

func startServer(t *testing.T) *server {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err, "the AG-UI test server needs node (and npm ci in web/)")
	cmd := exec.Command(node, "testdata/server.mjs", "0", "../../web/node_modules")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the server's first line")
	port, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
	require.True(t, ok, "the server printed %q", line)
	return &server{URL: "http://127.0.0.1:" + port}
}

// recorded is a request the server received.
type recorded struct {
	Headers map[string]string `json:"headers"`
	Body    struct {
		ThreadID        string          `json:"threadId"`
		RunID           string          `json:"runId"`
		ProtocolVersion string          `json:"protocolVersion"`
		State           json.RawMessage `json:"state"`
		Messages        []message       `json:"messages"`
		Tools           json.RawMessage `json:"tools"`
		Context         json.RawMessage `json:"context"`
		ForwardedProps  json.RawMessage `json:"forwardedProps"`
		Resume          []resumeEntry   `json:"resume"`
	} `json:"body"`
}

func (s *server) get(t *testing.T, path string, v any) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}

func (s *server) requests(t *testing.T) []recorded {
	var rs []recorded
	s.get(t, "/requests", &rs)
	return rs
}

func (s *server) aborts(t *testing.T) int {
	var st struct{ Aborts int }
	s.get(t, "/stats", &st)
	return st.Aborts
}

func newAgent(t *testing.T, url string, cfg Config) *Agent {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.URL = url
	cfg.Client = &http.Client{Transport: tr}
	cfg.Logger = zerolog.Nop()
	a, err := New(cfg)
	require.NoError(t, err)
	a.backoff = time.Millisecond
	return a
}

func request(content string) conversation.Request {
	return conversation.Request{SessionID: uuid.New(), RunID: uuid.New(), Content: content}
}

func codeOf(t *testing.T, err error) string {
	t.Helper()
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	return ce.Code
}

func TestText(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	req := request("hello")
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), req, rec))
	require.Equal(t, []string{"text: Hello", "text: , world", "usage: 10 5 10 0"}, rec.Log())

	rs := s.requests(t)
	require.Len(t, rs, 1)
	b := rs[0].Body
	require.Equal(t, req.SessionID.String(), b.ThreadID)
	require.Equal(t, req.RunID.String(), b.RunID)
	require.Equal(t, "1.0", b.ProtocolVersion)
	require.JSONEq(t, `{}`, string(b.State))
	require.JSONEq(t, `[]`, string(b.Tools))
	require.JSONEq(t, `[]`, string(b.Context))
	require.JSONEq(t, `{}`, string(b.ForwardedProps))
	require.Equal(t, []message{{ID: "user-" + req.RunID.String(), Role: "user", Content: ptr("hello")}}, b.Messages)
	require.Equal(t, "text/event-stream", rs[0].Headers["accept"])
	require.Equal(t, "application/json", rs[0].Headers["content-type"])
}

func TestHistory(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	ids := make([]uuid.UUID, 9)
	for i := range ids {
		ids[i] = uuid.New()
	}
	out := func(s string) *string { return &s }
	req := request("hello")
	req.History = []chat.Message{
		{ID: ids[0], Role: chat.RoleUser, Kind: chat.KindText, Content: "What is the weather?"},
		{ID: ids[1], Role: chat.RoleAssistant, Kind: chat.KindReasoning, Content: "They want the weather."},
		{ID: ids[2], Role: chat.RoleAssistant, Kind: chat.KindText, Content: "Let me "},
		{ID: ids[3], Role: chat.RoleAssistant, Kind: chat.KindText, Content: "look."},
		{ID: ids[4], Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "c1", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`), Output: out("sunny"), Status: chat.ToolOK}},
		{ID: ids[5], Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "c2", Name: "delete_file", Input: json.RawMessage(`{}`), Output: out(conversation.DeclinedOutput), Status: chat.ToolDenied}},
		{ID: ids[6], Role: chat.RoleAssistant, Kind: chat.KindText, Content: "It is sunny."},
		{ID: ids[7], Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "c3", Name: "flaky", Output: out("half"), Status: chat.ToolError}, Error: &chat.ErrorInfo{Code: "tool_error", Message: "it broke"}},
		{ID: ids[8], Role: chat.RoleSystem, Kind: chat.KindText, Content: "The sandbox was replaced."},
	}
	require.NoError(t, a.Run(context.Background(), req, &agenttest.Recorder{}))
	got := s.requests(t)[0].Body.Messages
	want := []message{
		{ID: ids[0].String(), Role: "user", Content: ptr("What is the weather?")},
		{ID: ids[2].String(), Role: "assistant", Content: ptr("Let me look."), ToolCalls: []toolCall{
			{ID: "c1", Type: "function", Function: functionCall{Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{ID: "c2", Type: "function", Function: functionCall{Name: "delete_file", Arguments: `{}`}},
		}},
		{ID: ids[4].String(), Role: "tool", ToolCallID: "c1", Content: ptr("sunny")},
		{ID: ids[5].String(), Role: "tool", ToolCallID: "c2", Content: ptr(`{"approved":false,"reason":"The user declined to run this tool."}`)},
		{ID: ids[6].String(), Role: "assistant", Content: ptr("It is sunny."), ToolCalls: []toolCall{
			{ID: "c3", Type: "function", Function: functionCall{Name: "flaky", Arguments: `{}`}},
		}},
		{ID: ids[7].String(), Role: "tool", ToolCallID: "c3", Content: ptr("half"), Error: "it broke"},
		{ID: ids[8].String(), Role: "system", Content: ptr("The sandbox was replaced.")},
		{ID: "user-" + req.RunID.String(), Role: "user", Content: ptr("hello")},
	}
	require.Equal(t, want, got)
}

func TestToolTheAgentRan(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), request("tool"), rec))
	require.Equal(t, []string{
		"text: Let me look.",
		`tool.start: call-weather get_weather {"city":"Paris"}`,
		"tool.end: call-weather ok sunny, 21°C",
		"text: It is sunny in Paris.",
		"usage: 10 5 10 0",
	}, rec.Log())
	require.Len(t, s.requests(t), 1, "a call the agent ran needs no second request")
}

func TestApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		decision     conversation.Decision
		reply        string
		toolEnd      bool
	}{
		{"approved", "approve", conversation.Decision{Approved: true}, "Deleted, as you approved.", true},
		{"denied", "approve", conversation.Decision{Output: conversation.DeclinedOutput}, "Not deleted: " + conversation.DeclinedOutput, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			a := newAgent(t, s.URL, Config{})
			rec := &agenttest.Recorder{Decide: func(conversation.ToolCall) conversation.Decision { return tc.decision }}
			req := request(tc.script)
			require.NoError(t, a.Run(context.Background(), req, rec))
			want := []string{"text: I need your approval.", `tool.approval: call-delete delete_file {"path":"/tmp/x"}`}
			if tc.script == "approve" {
				want = append(want, "usage: 10 5 10 0")
				want[1], want[2] = want[2], want[1] // usage comes with RUN_FINISHED, before the approval
			}
			content := approvalContent(tc.decision)
			if tc.toolEnd {
				want = append(want, "tool.end: call-delete ok "+content)
			}
			want = append(want, "text: "+tc.reply)
			log := rec.Log()
			require.Equal(t, want, log[:len(log)-1])
			require.Equal(t, tc.reply, strings.TrimPrefix(rec.Reply(), "I need your approval."))

			rs := s.requests(t)
			require.Len(t, rs, 2)
			require.Equal(t, []message{
				{ID: "user-" + req.RunID.String(), Role: "user", Content: ptr(tc.script)},
				{ID: "m1", Role: "assistant", Content: ptr("I need your approval."), ToolCalls: []toolCall{
					{ID: "call-delete", Type: "function", Function: functionCall{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}},
				}},
				{ID: "result-call-delete", Role: "tool", ToolCallID: "call-delete", Content: ptr(content)},
			}, rs[1].Body.Messages)
			require.Equal(t, rs[0].Body.RunID, rs[1].Body.RunID)
		})
	}
}

// A call the agent interrupts for (an AG-UI 1.0 RUN_FINISHED with an interrupt outcome,
// as Pydantic AI's requires_approval tools end) is resumed as Pydantic AI expects: the
// next request carries the call without a tool message and the decision in resume; the
// agent runs or declines it and streams its result, which ends the call. The interrupt
// is stored with the state while the call waits.
func TestInterruptResumed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		decision conversation.Decision
		end      string // the call's end as the recorder logs it ("" when the denial ended it)
		reply    string
	}{
		{"approved", conversation.Decision{Approved: true}, "tool.end: call-delete ok deleted /tmp/x", "Deleted, as you approved. [int-1:resolved]"},
		{"denied", conversation.Decision{Output: conversation.DeclinedOutput}, "", "Not deleted: " + conversation.DeclinedOutput + " [int-1:resolved]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t)
			a := newAgent(t, s.URL, Config{})
			rec := &agenttest.Recorder{Decide: func(conversation.ToolCall) conversation.Decision { return tc.decision }}
			req := request("interrupt")
			require.NoError(t, a.Run(context.Background(), req, rec))
			want := []string{
				"text: I need your approval.",
				`state: {"chatd.agui":1,"interrupts":{"call-delete":"int-1"}}`,
				`tool.approval: call-delete delete_file {"path":"/tmp/x"}`,
			}
			if tc.end != "" {
				want = append(want, tc.end)
			}
			want = append(want, "text: "+tc.reply)
			log := rec.Log()
			require.Equal(t, want, log[:len(log)-1], "%q", log)

			rs := s.requests(t)
			require.Len(t, rs, 2)
			require.Equal(t, []message{
				{ID: "user-" + req.RunID.String(), Role: "user", Content: ptr("interrupt")},
				{ID: "m1", Role: "assistant", Content: ptr("I need your approval."), ToolCalls: []toolCall{
					{ID: "call-delete", Type: "function", Function: functionCall{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}},
				}},
			}, rs[1].Body.Messages, "no tool message: the resume answers the call")
			requireResume(t, rs[1].Body.Resume, approvalContent(tc.decision))
		})
	}
}

// requireResume checks that a request resumed int-1 with payload.
func requireResume(t *testing.T, got []resumeEntry, payload string) {
	t.Helper()
	require.Len(t, got, 1)
	require.Equal(t, "int-1", got[0].InterruptID)
	require.Equal(t, "resolved", got[0].Status)
	b, err := json.Marshal(got[0].Payload)
	require.NoError(t, err)
	require.JSONEq(t, payload, string(b))
}

// A run continued after a restart while its interrupted call waited resumes it: the
// stored state names the interrupt, so the decision goes back in resume, not as a tool
// message the agent would refuse.
func TestInterruptResumedAfterARestart(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	req := request("interrupt")
	call := uuid.New()
	req.Checkpoint = []chat.Message{
		{ID: uuid.New(), Role: chat.RoleAssistant, Kind: chat.KindText, Content: "I need your approval.", Status: chat.MessageComplete},
		{ID: call, Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "call-delete", Name: "delete_file", Input: json.RawMessage(`{"path":"/tmp/x"}`), Status: chat.ToolAwaitingApproval}},
	}
	req.AgentState = func() (json.RawMessage, error) {
		return json.RawMessage(`{"chatd.agui":1,"state":{"n":1},"interrupts":{"call-delete":"int-1"}}`), nil
	}
	rec := &agenttest.Recorder{Decide: func(conversation.ToolCall) conversation.Decision { return conversation.Decision{Approved: true} }}
	require.NoError(t, a.Run(context.Background(), req, rec))
	rs := s.requests(t)
	require.Len(t, rs, 1, "the decision is the first request's")
	require.JSONEq(t, `{"n":1}`, string(rs[0].Body.State), "the agent's own state, unwrapped")
	requireResume(t, rs[0].Body.Resume, `{"approved":true}`)
	for _, m := range rs[0].Body.Messages {
		require.NotEqual(t, "tool", m.Role, "no tool message for the resumed call")
	}
	require.Contains(t, rec.Log(), "tool.end: call-delete ok deleted /tmp/x")
	require.Equal(t, "I need your approval.Deleted, as you approved. [int-1:resolved]", "I need your approval."+rec.Reply())
}

func TestCheckpointPartialText(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	req := request("hello")
	id := uuid.New()
	req.Checkpoint = []chat.Message{
		{ID: uuid.New(), Role: chat.RoleAssistant, Kind: chat.KindReasoning, Content: "Greet them."},
		{ID: id, Role: chat.RoleAssistant, Kind: chat.KindText, Content: "Hel", Status: chat.MessageInterrupted},
	}
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), req, rec))
	msgs := s.requests(t)[0].Body.Messages
	require.Len(t, msgs, 2)
	require.Equal(t, message{ID: id.String(), Role: "assistant", Content: ptr("Hel")}, msgs[1], "the partial answer is the last message: the agent continues it")
}

func TestCheckpointAwaitingApproval(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	req := request("approve")
	out := "partial"
	req.Checkpoint = []chat.Message{
		{ID: uuid.New(), Role: chat.RoleAssistant, Kind: chat.KindText, Content: "I need your approval."},
		{ID: uuid.New(), Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "call-lookup", Name: "lookup", Input: json.RawMessage(`{}`), Output: &out, Status: chat.ToolRunning}},
		{ID: uuid.New(), Role: chat.RoleTool, Tool: &chat.ToolCall{CallID: "call-delete", Name: "delete_file", Input: json.RawMessage(`{"path":"/tmp/x"}`), Status: chat.ToolAwaitingApproval}},
	}
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), req, rec))
	require.Equal(t, []string{
		"tool.await: call-delete",
		"tool.end: call-lookup interrupted " + interrupted,
		`tool.end: call-delete ok {"approved":true}`,
		"text: Deleted, as you approved.",
		"usage: 10 5 10 0",
	}, rec.Log(), "no second ToolStart nor approval: the call waits for its decision")
	rs := s.requests(t)
	require.Len(t, rs, 1)
	msgs := rs[0].Body.Messages
	require.Len(t, msgs, 4)
	require.Equal(t, "assistant", msgs[1].Role)
	require.Len(t, msgs[1].ToolCalls, 2)
	require.Equal(t, message{ID: req.Checkpoint[1].ID.String(), Role: "tool", ToolCallID: "call-lookup", Content: ptr(interrupted), Error: interrupted}, msgs[2])
	require.Equal(t, message{ID: req.Checkpoint[2].ID.String(), Role: "tool", ToolCallID: "call-delete", Content: ptr(`{"approved":true}`)}, msgs[3])
}

func TestCancelMidStream(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	rec := &agenttest.Recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, request("slow"), rec) }()
	require.Eventually(t, func() bool { return len(rec.Log()) >= 3 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { return s.aborts(t) == 1 }, 10*time.Second, 5*time.Millisecond, "the agent saw its request end")
	require.True(t, strings.HasPrefix(rec.Reply(), "tick 0 tick 1 "))
}

func TestFailOnceIsRetried(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{Header: func(_ conversation.Request, _, attempt int) http.Header {
		return http.Header{"X-Attempt": {strconv.Itoa(attempt)}}
	}})
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), request("fail-once"), rec))
	require.Equal(t, "Second time lucky.", rec.Reply())
	rs := s.requests(t)
	require.Len(t, rs, 2)
	require.Equal(t, "1", rs[0].Headers["x-attempt"])
	require.Equal(t, "2", rs[1].Headers["x-attempt"])
}

func TestBadResponses(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	for _, tc := range []struct {
		script, code, msg string
		log               []string
	}{
		{"garbage", CodeBadResponse, "text/plain", nil},
		{"truncated", CodeBadResponse, "without RUN_FINISHED", []string{"text: Half an ans"}},
		{"error", conversation.CodeAgent, "the model is overloaded", nil},
	} {
		t.Run(tc.script, func(t *testing.T) {
			a := newAgent(t, s.URL, Config{})
			rec := &agenttest.Recorder{}
			err := a.Run(context.Background(), request(tc.script), rec)
			require.Equal(t, tc.code, codeOf(t, err))
			require.ErrorContains(t, err, tc.msg)
			require.Equal(t, tc.log, rec.Log(), "what streamed stays")
		})
	}
	require.Len(t, s.requests(t), 3, "none of them is retried")
}

func TestStatuses(t *testing.T) {
	t.Parallel()
	t.Run("4xx", func(t *testing.T) {
		srv := agenttest.NewServer(t, agenttest.Status(404, `{"error":"no such agent"}`))
		err := newAgent(t, srv.URL, Config{}).Run(context.Background(), request("hello"), &agenttest.Recorder{})
		require.Equal(t, CodeBadResponse, codeOf(t, err))
		require.ErrorContains(t, err, "no such agent")
	})
	t.Run("5xx and 429", func(t *testing.T) {
		srv := agenttest.NewServer(t, agenttest.Status(503, `{}`), agenttest.Status(429, `{}`, "Retry-After", "0"), agenttest.Status(502, `{}`))
		err := newAgent(t, srv.URL, Config{Retries: 2}).Run(context.Background(), request("hello"), &agenttest.Recorder{})
		require.Equal(t, CodeUnreachable, codeOf(t, err))
		require.ErrorContains(t, err, "502")
		require.Len(t, srv.Requests(), 3)
	})
	t.Run("not JSON", func(t *testing.T) {
		srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data("hello")...))
		err := newAgent(t, srv.URL, Config{}).Run(context.Background(), request("hello"), &agenttest.Recorder{})
		require.Equal(t, CodeBadResponse, codeOf(t, err))
	})
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	clock := clockwork.NewFakeClock()
	a := newAgent(t, s.URL, Config{Clock: clock, Timeout: time.Minute})
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background(), request("silent"), &agenttest.Recorder{}) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return len(s.requests(t)) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(59 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("ended before its timeout: %v", err)
	default:
	}
	clock.Advance(time.Second)
	err := <-done
	require.Equal(t, CodeTimeout, codeOf(t, err))
	require.Eventually(t, func() bool { return s.aborts(t) == 1 }, 10*time.Second, 5*time.Millisecond, "the request was given up")
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	var attempts []int
	a := newAgent(t, url, Config{Retries: 2, Header: func(_ conversation.Request, _, attempt int) http.Header {
		attempts = append(attempts, attempt)
		return nil
	}})
	err = a.Run(context.Background(), request("hello"), &agenttest.Recorder{})
	require.Equal(t, CodeUnreachable, codeOf(t, err))
	require.Equal(t, []int{1, 2, 3}, attempts)
}

func TestSteps(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rec := &agenttest.Recorder{}
	require.NoError(t, newAgent(t, s.URL, Config{}).Run(context.Background(), request("steps"), rec))
	require.Equal(t, []string{
		"progress: 0/1 plan", "progress: 1/1 plan",
		"progress: 1/2 act", "progress: 2/2 act",
		"text: Done in two steps.", "usage: 10 5 10 0",
	}, rec.Log())
}

func TestReasoning(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rec := &agenttest.Recorder{}
	require.NoError(t, newAgent(t, s.URL, Config{}).Run(context.Background(), request("reasoning"), rec))
	require.Equal(t, []string{"reasoning: Thinking it over.", "reasoning.end: ", "text: Thought about it.", "usage: 10 5 10 0"}, rec.Log())
}

func TestStateRoundTrip(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	req := request("state")
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), req, rec))
	const after = `{"counter":2,"items":["a","b"]}`
	var states []string
	for _, l := range rec.Log() {
		if s, ok := strings.CutPrefix(l, "state: "); ok {
			states = append(states, s)
		}
	}
	require.Len(t, states, 2, "the snapshot and the state after the delta are reported: %v", rec.Log())
	require.JSONEq(t, after, states[1])

	next := request("hello")
	next.SessionID = req.SessionID
	next.AgentState = func() (json.RawMessage, error) { return json.RawMessage(states[1]), nil }
	require.NoError(t, a.Run(context.Background(), next, &agenttest.Recorder{}))
	rs := s.requests(t)
	require.JSONEq(t, `{}`, string(rs[0].Body.State))
	require.JSONEq(t, after, string(rs[1].Body.State), "the session's next run starts from the state it is given")

	failing := request("hello")
	failing.AgentState = func() (json.RawMessage, error) {
		return nil, &conversation.Error{Code: conversation.CodeStorage, Message: "down"}
	}
	err := a.Run(context.Background(), failing, &agenttest.Recorder{})
	require.Equal(t, conversation.CodeStorage, codeOf(t, err), "a state that cannot be read is not replaced by {}")
	require.Len(t, s.requests(t), 2, "the agent is not asked without its state")
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	req := request("hello")
	a := newAgent(t, s.URL, Config{Header: func(r conversation.Request, _, _ int) http.Header {
		return http.Header{
			"X-Chatd-Session": {r.SessionID.String()},
			"Authorization":   {"Bearer secret"},
			"Accept":          {"application/json"}, // overridden: the answer must be SSE
		}
	}})
	require.NoError(t, a.Run(context.Background(), req, &agenttest.Recorder{}))
	h := s.requests(t)[0].Headers
	require.Equal(t, req.SessionID.String(), h["x-chatd-session"])
	require.Equal(t, "Bearer secret", h["authorization"])
	require.Equal(t, "text/event-stream", h["accept"])
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "localhost:8000", "ftp://x/y", "http://"} {
		_, err := New(Config{URL: u})
		require.Error(t, err, u)
	}
	a, err := New(Config{URL: "http://127.0.0.1:1/agent"})
	require.NoError(t, err)
	require.Equal(t, DefaultTimeout, a.cfg.Timeout)
	require.Equal(t, DefaultRetries, a.cfg.Retries)
	a, err = New(Config{URL: "https://agent.example/run", Retries: -1})
	require.NoError(t, err)
	require.Equal(t, 0, a.cfg.Retries)
}

func TestPatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		doc, patch, want string
	}{
		{`{"foo":"bar"}`, `[{"op":"add","path":"/baz","value":"qux"}]`, `{"baz":"qux","foo":"bar"}`},
		{`{"foo":["bar","baz"]}`, `[{"op":"add","path":"/foo/1","value":"qux"}]`, `{"foo":["bar","qux","baz"]}`},
		{`{"baz":"qux","foo":"bar"}`, `[{"op":"remove","path":"/baz"}]`, `{"foo":"bar"}`},
		{`{"foo":["bar","qux","baz"]}`, `[{"op":"remove","path":"/foo/1"}]`, `{"foo":["bar","baz"]}`},
		{`{"baz":"qux","foo":"bar"}`, `[{"op":"replace","path":"/baz","value":"boo"}]`, `{"baz":"boo","foo":"bar"}`},
		{`{"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}`, `[{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]`, `{"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}`},
		{`{"foo":["all","grass","cows","eat"]}`, `[{"op":"move","from":"/foo/1","path":"/foo/3"}]`, `{"foo":["all","cows","eat","grass"]}`},
		{`{"baz":"qux","foo":["a",2,"c"]}`, `[{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]`, `{"baz":"qux","foo":["a",2,"c"]}`},
		{`{"foo":"bar"}`, `[{"op":"add","path":"/child","value":{"grandchild":{}}}]`, `{"foo":"bar","child":{"grandchild":{}}}`},
		{`{"foo":["bar"]}`, `[{"op":"add","path":"/foo/-","value":["abc","def"]}]`, `{"foo":["bar",["abc","def"]]}`},
		{`{"/":9,"~1":10}`, `[{"op":"test","path":"/~01","value":10},{"op":"copy","from":"/~1","path":"/c"}]`, `{"/":9,"~1":10,"c":9}`},
		{`{"a":1}`, `[{"op":"replace","path":"","value":[1]}]`, `[1]`},
		{`{"a":{"b":[1,2]}}`, `[{"op":"copy","from":"/a","path":"/c"},{"op":"add","path":"/c/b/-","value":3}]`, `{"a":{"b":[1,2]},"c":{"b":[1,2,3]}}`},
	} {
		var ops []patchOp
		require.NoError(t, json.Unmarshal([]byte(tc.patch), &ops))
		got, err := applyPatch(json.RawMessage(tc.doc), ops)
		require.NoError(t, err, tc.patch)
		require.JSONEq(t, tc.want, string(got), tc.patch)
	}
	for _, tc := range []struct{ doc, patch string }{
		{`{"baz":"qux"}`, `[{"op":"test","path":"/baz","value":"bar"}]`},
		{`{"foo":"bar"}`, `[{"op":"add","path":"/baz/bat","value":"qux"}]`},
		{`{"foo":"bar"}`, `[{"op":"remove","path":"/nope"}]`},
		{`{"foo":"bar"}`, `[{"op":"replace","path":"/nope","value":1}]`},
		{`{"foo":[1]}`, `[{"op":"add","path":"/foo/2","value":1}]`},
		{`{"foo":[1]}`, `[{"op":"add","path":"/foo/01","value":1}]`},
		{`{"foo":{}}`, `[{"op":"move","from":"/foo","path":"/foo/bar"}]`},
		{`{"foo":1}`, `[{"op":"frobnicate","path":"/foo"}]`},
		{`{"foo":1}`, `[{"op":"add","path":"foo","value":1}]`},
	} {
		var ops []patchOp
		require.NoError(t, json.Unmarshal([]byte(tc.patch), &ops))
		_, err := applyPatch(json.RawMessage(tc.doc), ops)
		require.Error(t, err, tc.patch)
	}
}

func TestLabel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a b", label(" a\nb\t"))
	require.Equal(t, 200, len([]rune(label(strings.Repeat("é", 300)))))
	require.Equal(t, "\uFFFDx", label("\xffx"))
}

// Event shapes the scripted server does not send: chunks, the THINKING_* names of older
// producers, another role's text, content parts, and what is ignored.
func TestEventVariants(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"THINKING_START"}`,
		`{"type":"THINKING_TEXT_MESSAGE_START"}`,
		`{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"hmm"}`,
		`{"type":"THINKING_TEXT_MESSAGE_END"}`,
		`{"type":"THINKING_END"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","messageId":"m1","role":"assistant","delta":"Hi"}`,
		`{"type":"TEXT_MESSAGE_CHUNK","delta":" there"}`,
		`{"type":"TEXT_MESSAGE_START","messageId":"u1","role":"user"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"u1","delta":"an echo of the user"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"u1"}`,
		`{"type":"MESSAGES_SNAPSHOT","messages":[]}`,
		`{"type":"RAW","event":{}}`,
		`{"type":"CUSTOM","name":"x","value":1}`,
		`{"type":"ACTIVITY_SNAPSHOT","messageId":"a1","activityType":"plan","content":{}}`,
		`{"type":"SOMETHING_NEWER"}`,
		`{"type":"STATE_DELTA","delta":[{"op":"remove","path":"/nope"}]}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c1","toolCallName":"search","parentMessageId":"m1","delta":"{\"q\":"}`,
		`{"type":"TOOL_CALL_CHUNK","delta":"\"go\"}"}`,
		`{"type":"TOOL_CALL_RESULT","messageId":"r1","toolCallId":"c1","content":[{"type":"text","text":"found "},{"type":"text","text":"it"}]}`,
		`{"type":"TOOL_CALL_CHUNK","toolCallId":"c2","toolCallName":"confirm","delta":"{}"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	)...), agenttest.SSE(agenttest.Data(
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	)...))
	a := newAgent(t, srv.URL, Config{})
	rec := &agenttest.Recorder{}
	req := request("hello")
	require.NoError(t, a.Run(context.Background(), req, rec))
	require.Equal(t, []string{
		"reasoning: hmm", "reasoning.end: ",
		"text: Hi", "text:  there",
		`tool.start: c1 search {"q":"go"}`, "tool.end: c1 ok found it",
		"tool.approval: c2 confirm {}", `tool.end: c2 ok {"approved":true}`,
	}, rec.Log())
	var body struct{ Messages []message }
	require.NoError(t, json.Unmarshal(srv.Requests()[1].Body, &body))
	require.Equal(t, []message{
		{ID: "user-" + req.RunID.String(), Role: "user", Content: ptr("hello")},
		{ID: "m1", Role: "assistant", Content: ptr("Hi there"), ToolCalls: []toolCall{
			{ID: "c1", Type: "function", Function: functionCall{Name: "search", Arguments: `{"q":"go"}`}},
		}},
		{ID: "r1", Role: "tool", ToolCallID: "c1", Content: ptr("found it")},
		{ID: "calls-c2", Role: "assistant", ToolCalls: []toolCall{ // after a result: a new step
			{ID: "c2", Type: "function", Function: functionCall{Name: "confirm", Arguments: `{}`}},
		}},
		{ID: "result-c2", Role: "tool", ToolCallID: "c2", Content: ptr(`{"approved":true}`)},
	}, body.Messages)
}

// A run cancelled while it waits for a decision returns at once.
func TestCancelWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	a := newAgent(t, s.URL, Config{})
	rec := &agenttest.Recorder{Hold: make(chan string, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, request("approve"), rec) }()
	require.Equal(t, "call-delete", <-rec.Hold)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Len(t, s.requests(t), 1)
}

// Two calls left to chatd in one turn are asked for at once; the next turn carries both
// decisions.
func TestTwoApprovalsAtOnce(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"a","toolCallName":"one"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"a"}`,
		`{"type":"TOOL_CALL_START","toolCallId":"b","toolCallName":"two"}`,
		`{"type":"TOOL_CALL_ARGS","toolCallId":"b","delta":"not json"}`,
		`{"type":"TOOL_CALL_END","toolCallId":"b"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	)...), agenttest.SSE(agenttest.Data(
		`{"type":"RUN_STARTED","threadId":"t","runId":"r"}`,
		`{"type":"RUN_FINISHED","threadId":"t","runId":"r"}`,
	)...))
	rec := &agenttest.Recorder{Hold: make(chan string, 2)}
	done := make(chan error, 1)
	go func() { done <- newAgent(t, srv.URL, Config{}).Run(context.Background(), request("go"), rec) }()
	require.Equal(t, "a", <-rec.Hold)
	require.Equal(t, "b", <-rec.Hold, "asked before the first is decided")
	rec.Give("b", conversation.Decision{Output: conversation.ExpiredOutput})
	rec.Give("a", conversation.Decision{Approved: true})
	require.NoError(t, <-done)
	require.Equal(t, []string{
		"tool.approval: a one {}", `tool.approval: b two "not json"`, `tool.end: a ok {"approved":true}`,
	}, rec.Log())
	var body struct{ Messages []message }
	require.NoError(t, json.Unmarshal(srv.Requests()[1].Body, &body))
	require.Len(t, body.Messages, 4)
	require.Len(t, body.Messages[1].ToolCalls, 2)
	require.Equal(t, "not json", body.Messages[1].ToolCalls[1].Function.Arguments, "the arguments go back as the agent wrote them")
	require.Equal(t, `{"approved":true}`, *body.Messages[2].Content)
	require.JSONEq(t, `{"approved":false,"reason":"`+conversation.ExpiredOutput+`"}`, *body.Messages[3].Content)
}
