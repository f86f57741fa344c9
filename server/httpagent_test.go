package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// aisdkAgent is web/test/agents/aisdk-agent.mjs: a real AI SDK route (the `ai` package's
// streamText with its mock model and two tools, toUIMessageStreamResponse()), run with
// node from web/node_modules.
type aisdkAgent struct {
	t    *testing.T
	base string
}

func startAISDKAgent(t *testing.T) *aisdkAgent {
	return startNodeAgent(t, filepath.Join("..", "web", "test", "agents", "aisdk-agent.mjs"))
}

// startNodeAgent runs a test agent's node script with args after its port (0: any) and
// reads the port from its first line, "listening <port>".
func startNodeAgent(t *testing.T, script string, args ...string) *aisdkAgent {
	t.Helper()
	node, err := exec.LookPath("node")
	require.NoError(t, err)
	script, err = filepath.Abs(script)
	require.NoError(t, err)
	cmd := exec.Command(node, append([]string{script, "0"}, args...)...)
	cmd.Dir = filepath.Dir(script)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "node (npm ci in web/ installs the agents' packages)")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "the agent's first line")
	var port int
	_, err = fmt.Sscanf(line, "listening %d", &port)
	require.NoError(t, err, "%q", line)
	return &aisdkAgent{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
}

func (a *aisdkAgent) url() string { return a.base + "/api/chat" }

type agentRequest struct {
	Headers map[string]any `json:"headers"`
	Body    struct {
		ID       string           `json:"id"`
		Trigger  string           `json:"trigger"`
		Messages []map[string]any `json:"messages"`
		State    json.RawMessage  `json:"state"` // AG-UI's
	} `json:"body"`
}

func (r agentRequest) header(name string) string {
	v := r.Headers[strings.ToLower(name)]
	s, _ := v.(string)
	return s
}

// lastUser is the text of the request's last user message.
func (r agentRequest) lastUser() string {
	for i := len(r.Body.Messages) - 1; i >= 0; i-- {
		m := r.Body.Messages[i]
		if m["role"] != "user" {
			continue
		}
		if s, ok := m["content"].(string); ok { // AG-UI's
			return s
		}
		parts, _ := m["parts"].([]any)
		var b strings.Builder
		for _, p := range parts {
			if pm, ok := p.(map[string]any); ok && pm["type"] == "text" {
				b.WriteString(fmt.Sprint(pm["text"]))
			}
		}
		return b.String()
	}
	return ""
}

func (a *aisdkAgent) requests(text string) []agentRequest {
	a.t.Helper()
	resp, err := http.Get(a.base + "/requests")
	require.NoError(a.t, err)
	defer resp.Body.Close()
	var all []agentRequest
	require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&all))
	var out []agentRequest
	for _, r := range all {
		if text == "" || r.lastUser() == text {
			out = append(out, r)
		}
	}
	return out
}

func (a *aisdkAgent) aborts() (n int, texts []string) {
	a.t.Helper()
	resp, err := http.Get(a.base + "/aborts")
	require.NoError(a.t, err)
	defer resp.Body.Close()
	var v struct {
		Count int
		Texts []string
	}
	require.NoError(a.t, json.NewDecoder(resp.Body).Decode(&v))
	return v.Count, v.Texts
}

func httpAgentEnv(a *aisdkAgent) map[string]string {
	return map[string]string{"CHATD_AGENT": "http", "CHATD_AGENT_URL": a.url(), "CHATD_AGENT_PROTOCOL": "aisdk"}
}

// chatd in front of an AI SDK route: the route's text, the tools it runs, its approvals
// decided by a person in chatd, its failures, cancel; every request carries chatd's
// headers (the run, the turn, the attempt, the user), each user's their own.
func TestHTTPAgentAISDK(t *testing.T) {
	a := startAISDKAgent(t)
	env := httpAgentEnv(a)
	env["CHATD_AUTH"], env["CHATD_JWT_SECRET"], env["CHATD_JWT_AUDIENCE"] = "jwt", testSecret, "chatd"
	env["CHATD_AGENT_FORWARD_TOKEN"] = "on"
	m, _ := startInProcess(t, env)
	st := openStore(t, m.cfg.DatabaseURL)
	tokens := map[string]string{}
	dial := func(user string) (*wstest.Client, string) {
		c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
		c.Token = authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: user, Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)})
		tokens[user] = c.Token
		return c, c.Hello("").SessionID
	}
	c, session := dial("alice")
	ask := func(c *wstest.Client, id, text string) (wstest.Frame, wstest.Frame) {
		t.Helper()
		ack := c.Chat(id, text)
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		return ack, c.ReadTerminal()
	}

	ack, end := ask(c, "h1", "hello")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	stored := sessionMessages(t, st, session)
	require.Equal(t, "Hello from the AI SDK agent.", replyText(stored, ack.RunID))
	reqs := a.requests("hello")
	require.Len(t, reqs, 1)
	r := reqs[0]
	require.Equal(t, ack.RunID, r.header("X-Chatd-Run"))
	require.Equal(t, session, r.header("X-Chatd-Session"))
	require.Equal(t, "1", r.header("X-Chatd-Turn"))
	require.Equal(t, "1", r.header("X-Chatd-Attempt"))
	require.Equal(t, "alice", r.header("X-Chatd-User"))
	require.Equal(t, "submit-message", r.Body.Trigger)
	require.Equal(t, session, r.Body.ID)

	// A tool the route runs itself: stored as a tool message with its result.
	ack, end = ask(c, "t1", "tool")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	stored = sessionMessages(t, st, session)
	tool := toolOf(t, stored, ack.RunID)
	require.Equal(t, "lookup", tool.Tool.Name)
	require.Equal(t, chat.ToolOK, tool.Tool.Status)
	require.Equal(t, "found: chatd", deref(tool.Tool.Output))
	require.Equal(t, "The lookup said: found: chatd.", replyText(stored, ack.RunID))

	// A tool that needs approval: a chatd approval; the decision goes back to the route
	// as the SDK's own client sends it, and the route runs the tool.
	for _, approve := range []bool{true, false} {
		ack := c.Chat(fmt.Sprintf("a-%v", approve), "approve")
		waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
		pa := waiting.Run.PendingApproval
		require.Equal(t, "transfer", pa.Name)
		require.JSONEq(t, `{"amount":5}`, string(pa.Input))
		decision := "deny"
		if approve {
			decision = "approve"
		}
		c.Send(map[string]any{"type": "tool.decide", "requestId": "d" + decision, "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": decision, "inputHash": pa.InputHash})
		require.Equal(t, "ack", c.ReadReply("d"+decision).Type)
		end := c.ReadTerminal()
		require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
		stored := sessionMessages(t, st, session)
		tool := toolOf(t, stored, ack.RunID)
		if approve {
			require.Equal(t, chat.ToolOK, tool.Tool.Status)
			require.Equal(t, "transferred 5", deref(tool.Tool.Output))
			require.Equal(t, "Transferred: transferred 5.", replyText(stored, ack.RunID))
		} else {
			require.Equal(t, chat.ToolDenied, tool.Tool.Status)
			require.Equal(t, "Not transferred.", replyText(stored, ack.RunID))
		}
	}
	reqs = a.requests("approve")
	require.Len(t, reqs, 4, "two turns each")
	require.Equal(t, "2", reqs[1].header("X-Chatd-Turn"))
	last := reqs[1].Body.Messages[len(reqs[1].Body.Messages)-1]
	require.Equal(t, "assistant", last["role"])
	approvalPart := map[string]any{}
	for _, p := range last["parts"].([]any) {
		if pm := p.(map[string]any); pm["type"] == "tool-transfer" {
			approvalPart = pm
		}
	}
	require.Equal(t, "approval-responded", approvalPart["state"])
	require.Equal(t, true, approvalPart["approval"].(map[string]any)["approved"])

	// A 500 first: asked again (attempt 2), and the run goes on.
	ack, end = ask(c, "f1", "fail-once")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Equal(t, "Recovered.", replyText(sessionMessages(t, st, session), ack.RunID))
	reqs = a.requests("fail-once")
	require.Len(t, reqs, 2)
	require.Equal(t, []string{"1", "2"}, []string{reqs[0].header("X-Chatd-Attempt"), reqs[1].header("X-Chatd-Attempt")})

	// Garbage: the run ends with a clear code.
	_, end = ask(c, "g1", "garbage")
	require.Equal(t, "chat.error", end.Type, "%s", end.Raw)
	require.Equal(t, "agent_bad_response", end.Run.Error.Code)

	// Every turn so far was read to its end: the route saw no abort, so its req.signal
	// means a stop.
	n, texts := a.aborts()
	require.Zero(t, n, "aborted: %v", texts)

	// Cancel mid-stream: the route sees its request end.
	ack = c.Chat("s1", "slow")
	c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x1", "runId": ack.RunID})
	end = c.ReadTerminal()
	require.Equal(t, "chat.cancelled", end.Type, "%s", end.Raw)
	require.Eventually(t, func() bool {
		n, texts := a.aborts()
		return n >= 1 && strings.Contains(strings.Join(texts, ","), "slow")
	}, 10*time.Second, 20*time.Millisecond, "the route saw the abort")
	require.NotEmpty(t, replyText(sessionMessages(t, st, session), ack.RunID), "the text so far is kept")

	// Two users at once: each request carries its own user.
	b, bobSession := dial("bob")
	ackA := c.Chat("ua", "alice here")
	ackB := b.Chat("ub", "bob here")
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	require.Equal(t, "chat.done", b.ReadTerminal().Type)
	require.Equal(t, "You said: alice here.", replyText(sessionMessages(t, st, session), ackA.RunID))
	require.Equal(t, "You said: bob here.", replyText(sessionMessages(t, st, bobSession), ackB.RunID))
	require.Equal(t, "alice", a.requests("alice here")[0].header("X-Chatd-User"))
	require.Equal(t, "bob", a.requests("bob here")[0].header("X-Chatd-User"))
	// CHATD_AGENT_FORWARD_TOKEN: each request carries its own user's token.
	require.Equal(t, tokens["alice"], a.requests("alice here")[0].header("X-Chatd-User-Token"))
	require.Equal(t, tokens["bob"], a.requests("bob here")[0].header("X-Chatd-User-Token"))
	for _, r := range a.requests("") {
		require.Equal(t, tokens[r.header("X-Chatd-User")], r.header("X-Chatd-User-Token"), "turn %s of run %s", r.header("X-Chatd-Turn"), r.header("X-Chatd-Run"))
	}
}

// An HTTP agent's run across chatd's restarts: an approval waits through a restart and
// the decision then goes to the route; kill -9 mid-answer, and the restarted chatd asks
// the turn again with the partial answer, which the route continues: the stored answer
// is the route's whole answer, once.
func TestHTTPAgentAcrossRestarts(t *testing.T) {
	for _, p := range httpAgentProtocols {
		t.Run(p.name, func(t *testing.T) { httpAgentAcrossRestarts(t, p) })
	}
}

// httpAgentProtocols are the two kinds of agent, with what each answers an approved
// approval.
type httpAgentProtocol struct {
	name     string
	start    func(*testing.T) *aisdkAgent
	env      func(*aisdkAgent) map[string]string
	approved string
	// approve is the message whose run asks for an approval: for AG-UI, one the agent
	// interrupts for (as Pydantic AI's requires_approval tools do), resumed after the
	// restart from the interrupt stored with the state.
	approve string
}

var httpAgentProtocols = []httpAgentProtocol{
	{"aisdk", startAISDKAgent, httpAgentEnv, "Transferred: transferred 5.", "approve"},
	{"agui", startAGUIAgent, func(a *aisdkAgent) map[string]string {
		return map[string]string{"CHATD_AGENT": "http", "CHATD_AGENT_URL": a.base + "/", "CHATD_AGENT_PROTOCOL": "agui"}
	}, "Deleted, as you approved. [int-1:resolved]", "interrupt"},
}

func httpAgentAcrossRestarts(t *testing.T, p httpAgentProtocol) {
	a := p.start(t)
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := p.env(a)
	env["DATABASE_URL"] = dbURL
	env["CHATD_RECOVER"] = "continue"
	proc := startChild(t, "chatd", env)
	c := wstest.Dial(t, proc.wsURL(), nil)
	session := c.Hello("").SessionID
	const state = `{"counter":2,"items":["a","b"]}`
	if p.name == "agui" {
		c.Chat("s1", "state") // the agent's state, to be given back after the restart
		require.Equal(t, "chat.done", c.ReadTerminal().Type)
	}

	ack := c.Chat("a1", p.approve)
	waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pa := waiting.Run.PendingApproval
	proc.signal(syscall.SIGTERM)
	proc.wait(30 * time.Second)
	proc = restartChild(t, proc, "chatd (restarted)", env)
	c = wstest.Dial(t, proc.wsURL(), nil)
	snap := c.Hello(session)
	require.NotNil(t, snap.ActiveRun, "%s", snap.Raw)
	require.Equal(t, "awaiting_approval", snap.ActiveRun.Status)
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": snap.ActiveRun.PendingApproval.InputHash})
	require.Equal(t, "ack", c.ReadReply("d1").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Contains(t, replyText(sessionMessages(t, st, session), ack.RunID), p.approved)
	if p.name == "agui" {
		reqs := a.requests(p.approve)
		require.Len(t, reqs, 2, "asked, then answered after the restart")
		for _, r := range reqs {
			require.JSONEq(t, state, string(r.Body.State), "the state the agent left, before the restart and after it")
		}
	}

	// kill -9 while the long answer streams.
	ack = c.Chat("l1", "long")
	c.Await(func(f wstest.Frame) bool {
		return f.Type == "chat.delta" && f.Text != nil && strings.Contains(*f.Text, "w2")
	})
	c.Await(func(f wstest.Frame) bool {
		return f.Type == "chat.delta" && f.Text != nil && strings.Contains(*f.Text, "w40")
	})
	proc.signal(syscall.SIGKILL)
	proc.wait(15 * time.Second)
	proc = restartChild(t, proc, "chatd (after kill -9)", env)
	c = wstest.Dial(t, proc.wsURL(), nil)
	c.Hello(session)
	if getRun(t, st, ack.RunID).Status.Active() {
		end = c.ReadTerminal()
		require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	}
	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i+1)
	}
	require.Equal(t, strings.Join(words, " "), replyText(sessionMessages(t, st, session), ack.RunID), "the whole answer, once")
	reqs := a.requests("long")
	require.GreaterOrEqual(t, len(reqs), 2)
	again := reqs[len(reqs)-1]
	require.Equal(t, "true", again.header("X-Chatd-Continued"))
	lastMsg := again.Body.Messages[len(again.Body.Messages)-1]
	require.Equal(t, "assistant", lastMsg["role"], "the partial answer is the last message")
}

// A run of an HTTP agent followed by a WebSocket tab and by an AI SDK client at once:
// both see it live, and both end equal to the stored transcript.
func TestHTTPAgentFollowedByEveryClient(t *testing.T) {
	for _, p := range httpAgentProtocols {
		t.Run(p.name, func(t *testing.T) { httpAgentFollowed(t, p.start(t), p.env) })
	}
}

func httpAgentFollowed(t *testing.T, a *aisdkAgent, env func(*aisdkAgent) map[string]string) {
	m, _ := startInProcess(t, env(a))
	st := openStore(t, m.cfg.DatabaseURL)
	body := `{"id":"follow-me","trigger":"submit-message","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"long"}]}]}`
	resp, err := http.Post("http://"+m.Addr()+"/v1/aisdk/chat", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sse := bufio.NewReader(resp.Body)
	var streamed strings.Builder
	read := func(until func() bool) {
		t.Helper()
		for !until() {
			line, err := sse.ReadString('\n')
			require.NoError(t, err, "the AI SDK stream ended early")
			data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var c struct{ Type, Delta string }
			require.NoError(t, json.Unmarshal([]byte(data), &c))
			if c.Type == "text-delta" {
				streamed.WriteString(c.Delta)
			}
			if c.Type == "finish" {
				return
			}
		}
	}
	read(func() bool { return strings.Contains(streamed.String(), "w5 ") })

	// A tab joins mid-run: caught up, then live.
	var session string
	require.NoError(t, st.Pool().QueryRow(dbCtx(t), "SELECT id::text FROM sessions WHERE client_id = 'follow-me'").Scan(&session))
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	snap := c.Hello(session)
	require.NotNil(t, snap.ActiveRun, "%s", snap.Raw)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	read(func() bool { return false })

	stored := sessionMessages(t, st, session)
	want := replyText(stored, end.RunID)
	require.True(t, strings.HasPrefix(want, "w1 w2 w3"), want)
	require.True(t, strings.HasSuffix(want, "w200"), want)
	require.Equal(t, want, streamed.String(), "the AI SDK client saw the stored answer")
	require.Empty(t, wstest.Diff(toWire(t, stored), c.State.Sorted()), "the tab equals the database")
}

// An agent that answers and then sends nothing: the run ends agent_timeout after
// CHATD_MODEL_TIMEOUT of silence (on chatd's clock), its text kept.
func TestHTTPAgentTimeout(t *testing.T) {
	a := startAISDKAgent(t)
	clock := clockwork.NewFakeClockAt(time.Now())
	env := httpAgentEnv(a)
	env["CHATD_MODEL_TIMEOUT"] = "45s"
	m, _ := startInProcess(t, env, func(m *Server) { m.clock = clock })
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	c.Hello("")
	ack := c.Chat("s1", "stall")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Eventually(t, func() bool { return len(a.requests("stall")) == 1 }, 10*time.Second, 10*time.Millisecond)
	done := make(chan wstest.Frame, 1)
	go func() { done <- c.ReadTerminal() }()
	for {
		clock.Advance(45 * time.Second)
		select {
		case end := <-done:
			require.Equal(t, "chat.error", end.Type, "%s", end.Raw)
			require.Equal(t, "agent_timeout", end.Run.Error.Code)
			require.Contains(t, end.Run.Error.Message, "CHATD_MODEL_TIMEOUT")
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// aguiAgent is agent/agui/testdata/server.mjs: an AG-UI agent built on the official
// @ag-ui/core and @ag-ui/encoder packages.
func startAGUIAgent(t *testing.T) *aisdkAgent {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join("..", "web", "node_modules"))
	require.NoError(t, err)
	return startNodeAgent(t, filepath.Join("..", "agent", "agui", "testdata", "server.mjs"), modules)
}

// chatd in front of an AG-UI agent: its text, a tool it runs, a call it leaves to the
// client (an approval in chatd, answered with the tool's result message), steps as
// progress, a 500 then success, garbage, cancel; each user's requests carry their own
// user; an AI SDK client reads the run as the WebSocket tab does.
func TestHTTPAgentAGUI(t *testing.T) {
	a := startAGUIAgent(t)
	env := map[string]string{"CHATD_AGENT": "http", "CHATD_AGENT_URL": a.base + "/", "CHATD_AGENT_PROTOCOL": "agui"}
	env["CHATD_AUTH"], env["CHATD_JWT_SECRET"], env["CHATD_JWT_AUDIENCE"] = "jwt", testSecret, "chatd"
	m, _ := startInProcess(t, env)
	st := openStore(t, m.cfg.DatabaseURL)
	dial := func(user string) (*wstest.Client, string) {
		c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
		c.Token = authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: user, Audience: "chatd", ExpiresAt: time.Now().Add(time.Hour)})
		return c, c.Hello("").SessionID
	}
	c, session := dial("alice")
	ask := func(text string) (wstest.Frame, wstest.Frame) {
		t.Helper()
		ack := c.Chat("r-"+text, text)
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		return ack, c.ReadTerminal()
	}
	aguiRequests := func() []map[string]any {
		resp, err := http.Get(a.base + "/requests")
		require.NoError(t, err)
		defer resp.Body.Close()
		var v []map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		return v
	}

	ack, end := ask("hello")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Equal(t, "Hello, world", replyText(sessionMessages(t, st, session), ack.RunID))
	first := aguiRequests()[0]
	headers := first["headers"].(map[string]any)
	require.Equal(t, "alice", headers["x-chatd-user"])
	require.Equal(t, ack.RunID, headers["x-chatd-run"])
	require.Equal(t, "1", headers["x-chatd-attempt"])
	require.Equal(t, "1", headers["x-chatd-turn"])
	body := first["body"].(map[string]any)
	require.Equal(t, session, body["threadId"])
	require.Equal(t, ack.RunID, body["runId"])

	ack, end = ask("tool")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	stored := sessionMessages(t, st, session)
	tool := toolOf(t, stored, ack.RunID)
	require.Equal(t, "get_weather", tool.Tool.Name)
	require.Equal(t, chat.ToolOK, tool.Tool.Status)
	require.Equal(t, "sunny, 21°C", deref(tool.Tool.Output))
	require.Contains(t, replyText(stored, ack.RunID), "It is sunny in Paris.")

	ack = c.Chat("r-approve", "approve")
	waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pa := waiting.Run.PendingApproval
	require.Equal(t, "delete_file", pa.Name)
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": pa.InputHash})
	require.Equal(t, "ack", c.ReadReply("d1").Type)
	end = c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	require.Contains(t, replyText(sessionMessages(t, st, session), ack.RunID), "Deleted, as you approved.")
	var turns []any
	for _, r := range aguiRequests() {
		if h := r["headers"].(map[string]any); h["x-chatd-run"] == ack.RunID {
			turns = append(turns, h["x-chatd-turn"])
		}
	}
	require.Equal(t, []any{"1", "2"}, turns, "the answer to the approval is the run's second turn")

	ack = c.Chat("r-steps", "steps")
	progressed := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Progress != nil })
	require.GreaterOrEqual(t, progressed.Run.Progress.Of, 1)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)

	_, end = ask("fail-once")
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	_, end = ask("garbage")
	require.Equal(t, "chat.error", end.Type, "%s", end.Raw)
	require.Equal(t, "agent_bad_response", end.Run.Error.Code)

	ack = c.Chat("r-slow", "slow")
	c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x1", "runId": ack.RunID})
	require.Equal(t, "chat.cancelled", c.ReadTerminal().Type)
	require.Eventually(t, func() bool {
		resp, err := http.Get(a.base + "/stats")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var s struct{ Aborts int }
		return json.NewDecoder(resp.Body).Decode(&s) == nil && s.Aborts >= 1
	}, 10*time.Second, 20*time.Millisecond, "the agent saw the abort")

	b, _ := dial("bob")
	ackB := b.Chat("rb", "hello")
	require.Equal(t, "chat.done", b.ReadTerminal().Type)
	for _, r := range aguiRequests() {
		h := r["headers"].(map[string]any)
		if h["x-chatd-run"] == ackB.RunID {
			require.Equal(t, "bob", h["x-chatd-user"])
		} else {
			require.Equal(t, "alice", h["x-chatd-user"])
		}
	}
}
