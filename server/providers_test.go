package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/auth/authtest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// startInProcess runs chatd in this process with env (DATABASE_URL and the log settings
// added), and closes it when the test ends. Its log is printed if the test fails.
func startInProcess(t *testing.T, env map[string]string, opts ...func(*Server)) (*Server, *syncBuffer) {
	t.Helper()
	full := map[string]string{"DATABASE_URL": storetest.NewURL(t), "CHATD_LOG_FORMAT": "json", "CHATD_LOG_LEVEL": "debug",
		"CHATD_BWRAP": os.Getenv("CHATD_BWRAP"), // make test-go names bubblewrap (scripts/bwrap.sh)
		// Not the default, which is shared by every test (and, as root, in /var/cache).
		"CHATD_SANDBOX_DIR": t.TempDir()}
	for k, v := range env {
		full[k] = v
	}
	logBuf := &syncBuffer{}
	args := []string{"-addr", "127.0.0.1:0"}
	if _, ok := env["CHATD_ADMIN_ADDR"]; !ok {
		args = append(args, "-admin-addr", "127.0.0.1:0") // not the default port, which other tests use too
	}
	cfg, err := ConfigFromEnv(args, envMap(full), logBuf)
	require.NoError(t, err)
	logger, err := newLogger(cfg, logBuf)
	require.NoError(t, err)
	m := newServer(cfg, logger)
	for _, o := range opts {
		o(m)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		require.NoError(t, m.Shutdown(ctx))
		if t.Failed() {
			t.Logf("chatd log:\n%s", logBuf.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.Start(ctx))
	return m, logBuf
}

// provider scripts one conversation with a tool call in a vendor's wire format: the first
// answer streams "I'll run " and holds until gate closes, then "it." and a shell call
// (echo hi); the second answers "It printed hi.".
type provider struct {
	name  string
	env   func(baseURL string) map[string]string
	first func(gate <-chan struct{}) agenttest.Answer
	// second is the answer after the tool result.
	second agenttest.Answer
	// toolResult finds the shell call's result in the second request's body.
	toolResult func(t *testing.T, body map[string]any) (callID, content string)
	callID     string
	// usage is what the run adds up: input, output, and the context the last call fills.
	usage chat.Usage
}

func openAIChunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `{"id":"chatcmpl-e2e","object":"chat.completion.chunk","created":1700000000,"model":"gpt-e2e","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + `}]}`
}

func openAIUsage(in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-e2e","object":"chat.completion.chunk","created":1700000000,"model":"gpt-e2e","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, in, out, in+out)
}

func anthropicEvent(name string, data string) agenttest.Event {
	return agenttest.Event{Name: name, Data: data}
}

func anthropicStart(in int) agenttest.Event {
	return anthropicEvent("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_e2e","type":"message","role":"assistant","model":"claude-e2e","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`, in))
}

func anthropicDelta(index int, delta string) agenttest.Event {
	return anthropicEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":%s}`, index, delta))
}

func anthropicText(index int, text string) agenttest.Event {
	b, _ := json.Marshal(text)
	return anthropicDelta(index, `{"type":"text_delta","text":`+string(b)+`}`)
}

func anthropicEnd(reason string, out int) []agenttest.Event {
	return []agenttest.Event{
		anthropicEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":%d}}`, reason, out)),
		anthropicEvent("message_stop", `{"type":"message_stop"}`),
	}
}

var providers = []provider{
	{
		name: "openai",
		env: func(base string) map[string]string {
			return map[string]string{"CHATD_AGENT": "openai", "OPENAI_BASE_URL": base + "/v1", "CHATD_MODEL": "gpt-e2e"}
		},
		first: func(gate <-chan struct{}) agenttest.Answer {
			return agenttest.Gated(gate,
				agenttest.Data(openAIChunk(`{"role":"assistant","content":""}`, ""), openAIChunk(`{"content":"I'll run "}`, "")),
				agenttest.Data(
					openAIChunk(`{"content":"it."}`, ""),
					openAIChunk(`{"tool_calls":[{"index":0,"id":"call_e2e","type":"function","function":{"name":"shell","arguments":""}}]}`, ""),
					openAIChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}`, ""),
					openAIChunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"echo hi\"}"}}]}`, ""),
					openAIChunk(`{}`, "tool_calls"),
					openAIUsage(40, 12),
					"[DONE]",
				))
		},
		second: agenttest.SSE(agenttest.Data(
			openAIChunk(`{"role":"assistant","content":"It printed "}`, ""),
			openAIChunk(`{"content":"hi."}`, ""),
			openAIChunk(`{}`, "stop"),
			openAIUsage(70, 4),
			"[DONE]",
		)...),
		toolResult: func(t *testing.T, body map[string]any) (string, string) {
			msgs := body["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			require.Equal(t, "tool", last["role"])
			prev := msgs[len(msgs)-2].(map[string]any)
			require.Equal(t, "assistant", prev["role"])
			require.Equal(t, "I'll run it.", prev["content"])
			return last["tool_call_id"].(string), last["content"].(string)
		},
		callID: "call_e2e",
		usage:  chat.Usage{InputTokens: 110, OutputTokens: 16, ContextTokens: 74, ContextWindow: 64000},
	},
	{
		name: "anthropic",
		env: func(base string) map[string]string {
			return map[string]string{"CHATD_AGENT": "anthropic", "ANTHROPIC_BASE_URL": base, "ANTHROPIC_API_KEY": "sk-e2e", "CHATD_MODEL": "claude-e2e"}
		},
		first: func(gate <-chan struct{}) agenttest.Answer {
			rest := []agenttest.Event{
				anthropicText(0, "it."),
				anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
				anthropicEvent("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_e2e","name":"shell","input":{}}}`),
				anthropicDelta(1, `{"type":"input_json_delta","partial_json":""}`),
				anthropicDelta(1, `{"type":"input_json_delta","partial_json":"{\"command\": "}`),
				anthropicDelta(1, `{"type":"input_json_delta","partial_json":"\"echo hi\"}"}`),
				anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":1}`),
			}
			return agenttest.Gated(gate,
				[]agenttest.Event{
					anthropicStart(40),
					anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
					anthropicEvent("ping", `{"type": "ping"}`),
					anthropicText(0, "I'll run "),
				},
				append(rest, anthropicEnd("tool_use", 12)...))
		},
		second: agenttest.SSE(append([]agenttest.Event{
			anthropicStart(70),
			anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			anthropicText(0, "It printed "),
			anthropicText(0, "hi."),
			anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		}, anthropicEnd("end_turn", 4)...)...),
		toolResult: func(t *testing.T, body map[string]any) (string, string) {
			msgs := body["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			require.Equal(t, "user", last["role"])
			block := last["content"].([]any)[0].(map[string]any)
			require.Equal(t, "tool_result", block["type"])
			prev := msgs[len(msgs)-2].(map[string]any)
			require.Equal(t, "assistant", prev["role"])
			blocks := prev["content"].([]any)
			require.Equal(t, "I'll run it.", blocks[0].(map[string]any)["text"])
			require.Equal(t, map[string]any{"command": "echo hi"}, blocks[1].(map[string]any)["input"])
			content := block["content"].([]any)[0].(map[string]any)["text"].(string)
			return block["tool_use_id"].(string), content
		},
		callID: "toolu_e2e",
		usage:  chat.Usage{InputTokens: 110, OutputTokens: 16, ContextTokens: 74, ContextWindow: 64000},
	},
}

// A conversation with a real provider through chatd: the answer streams, the client
// drops and comes back mid-stream, the model calls the approval-gated shell tool, a
// person approves, the command runs, its result goes back to the model in the vendor's
// format, and the final answer ends the run. The transcript in the database is what the
// client holds.
func TestProviderConversationEndToEnd(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			gate := make(chan struct{})
			srv := agenttest.NewServer(t, p.first(gate), p.second)
			env := p.env(srv.URL)
			env["CHATD_SHELL_TOOL"] = "on"
			env["CHATD_SANDBOX_DIR"] = sandboxDir(t)
			m, logBuf := startInProcess(t, env)
			require.Contains(t, logBuf.String(), "with "+p.name+" model")
			url := "ws://" + m.Addr() + "/v1/ws"

			c := wstest.Dial(t, url, nil)
			sessionID := c.Hello("").SessionID
			ack := c.Chat("req-1", "say hi with the shell")
			require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
			runID := ack.RunID
			c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "I'll run " })

			// The tab goes away mid-stream and comes back: caught up to the exact token.
			require.NoError(t, c.WS.CloseNow())
			c2, caught := c.Resume(url, nil)
			require.Equal(t, "resumed", caught.Type, "the gap is in the replay ring")
			require.NotNil(t, c2.State.ActiveRun)
			require.Equal(t, runID, c2.State.ActiveRun.RunID)
			require.Equal(t, "I'll run ", segmentText(c2.State))
			close(gate)

			// The model asks for the shell: the run waits for a person.
			st := c2.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
			require.NotNil(t, st.Run.PendingApproval)
			require.Equal(t, "shell", st.Run.PendingApproval.Name)
			require.JSONEq(t, `{"command":"echo hi"}`, string(st.Run.PendingApproval.Input))
			callID := st.Run.PendingApproval.ToolCallID
			require.Equal(t, p.callID, callID)
			require.Len(t, srv.Requests(), 1, "no model call while the tool waits")

			c2.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": runID, "toolCallId": callID, "decision": "approve"})
			require.Equal(t, "ack", c2.ReadReply("d1").Type)
			end := c2.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
			require.Equal(t, runID, end.Run.RunID)
			require.NotNil(t, end.Run.Usage)
			require.Equal(t, p.usage.ContextTokens, end.Run.Usage.ContextTokens)
			require.Equal(t, p.usage.ContextWindow, end.Run.Usage.ContextWindow)

			// Usage was announced as each model call reported it: after the first call
			// the context held its prompt and answer (40 + 12 tokens).
			var fills []int64
			for _, f := range c2.Seen {
				if f.Type != "run.status" || f.Run.Usage == nil {
					continue
				}
				// Later status changes (the approval) carry the usage too.
				if n := len(fills); n == 0 || fills[n-1] != f.Run.Usage.ContextTokens {
					fills = append(fills, f.Run.Usage.ContextTokens)
				}
			}
			require.Equal(t, []int64{52, 74}, fills)

			// The tool's result went back to the model, paired with its call.
			reqs := srv.Requests()
			require.Len(t, reqs, 2)
			id, content := p.toolResult(t, srv.Body(1))
			require.Equal(t, callID, id)
			require.Equal(t, "hi\n\n[exit code 0]", content)

			// The database holds the transcript the client holds.
			store := openStore(t, storeURL(m))
			stored := sessionMessages(t, store, sessionID)
			require.Empty(t, wstest.Diff(toWire(t, stored), c2.State.Sorted()))
			require.Len(t, stored, 4)
			require.Equal(t, "say hi with the shell", stored[0].Content)
			require.Equal(t, "I'll run it.", stored[1].Content)
			require.Equal(t, "complete", string(stored[1].Status))
			require.NotNil(t, stored[2].Tool)
			require.Equal(t, "shell", stored[2].Tool.Name)
			require.Equal(t, callID, stored[2].Tool.CallID)
			require.Equal(t, "ok", string(stored[2].Tool.Status))
			require.Equal(t, "hi\n\n[exit code 0]", *stored[2].Tool.Output)
			require.Equal(t, "It printed hi.", stored[3].Content)
			run := getRun(t, store, runID)
			require.Equal(t, "done", string(run.Status))
			require.Equal(t, env["CHATD_MODEL"], run.Model)
			require.Equal(t, p.usage, run.Usage)
		})
	}
}

// segmentText is the text of the state's newest assistant text segment.
func segmentText(s *wstest.State) string {
	msgs := s.Sorted()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" && msgs[i].Kind == "" {
			return msgs[i].Content
		}
	}
	return ""
}

// storeURL is the database chatd runs on.
func storeURL(m *Server) string { return m.cfg.DatabaseURL }

// With no provider configured chatd serves the demo agent, and its log says so and how
// to point it at a real model.
func TestDemoAgentIsTheDefaultAndSaysSo(t *testing.T) {
	m, logBuf := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "0s", "CHATD_DEMO_WORDS": "3"})
	require.Contains(t, logBuf.String(), "with the demo agent")
	require.Contains(t, logBuf.String(), "to use a real model: CHATD_AGENT=openai OPENAI_BASE_URL=http://localhost:11434/v1 CHATD_MODEL=llama3.2")

	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	c.Hello("")
	require.Equal(t, "ack", c.Chat("r", "hello").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type)
	require.Equal(t, "demo", end.Run.Model)
}

// A provider setting only the provider can check (Anthropic's thinking budget against
// the answer cap) stops chatd at start-up, not at the first message.
func TestBadProviderSettingFailsAtStart(t *testing.T) {
	cfg, err := ConfigFromEnv([]string{"-addr", "127.0.0.1:0", "-admin-addr", "127.0.0.1:0"}, envMap(map[string]string{
		"DATABASE_URL": storetest.NewURL(t), "CHATD_AGENT": "anthropic", "CHATD_MODEL": "claude-x",
		"ANTHROPIC_API_KEY": "k", "CHATD_THINKING_BUDGET": "500",
	}), &syncBuffer{})
	require.NoError(t, err)
	m := newServer(cfg, zerolog.Nop())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = m.Start(ctx)
	require.ErrorContains(t, err, "CHATD_THINKING_BUDGET")
	require.NoError(t, m.Shutdown(ctx))
}

// A refused chat.send never reaches the model provider, where each request is money:
// five repeats of an ended run's requestId, and five sends over the user's limit of
// active runs (CHATD_MAX_RUNS_PER_USER=1, in another session), make no request at the
// OpenAI-compatible server. Only the two runs that start do.
func TestRefusedSendsNeverReachTheProvider(t *testing.T) {
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	llm := agenttest.NewServer(t,
		agenttest.SSE(agenttest.Data(openAIChunk(`{"role":"assistant","content":"Hello."}`, ""), openAIChunk(`{}`, "stop"))...),
		agenttest.Gated(gate, agenttest.Data(openAIChunk(`{"role":"assistant","content":"Working"}`, "")), agenttest.Data(openAIChunk(`{}`, "stop"))),
	)
	m, _ := startInProcess(t, map[string]string{
		"CHATD_AGENT": "openai", "OPENAI_BASE_URL": llm.URL + "/v1", "CHATD_MODEL": "gpt-e2e",
		"CHATD_AUTH": "jwt", "CHATD_JWT_SECRET": testSecret, "CHATD_MAX_RUNS_PER_USER": "1",
	})
	alice := authtest.HS256(t, []byte(testSecret), authtest.Claims{Subject: "alice", ExpiresAt: time.Now().Add(time.Hour)})
	wsURL := "ws://" + m.Addr() + "/v1/ws"
	tab := wstest.Dial(t, wsURL, nil)
	tab.Token = alice
	tab.Hello("")
	first := tab.Chat("r1", "hi")
	require.Equal(t, "ack", first.Type, "%s", first.Raw)
	require.Equal(t, "chat.done", tab.ReadTerminal().Type)
	for range 5 {
		again := tab.Chat("r1", "hi")
		require.Equal(t, "ack", again.Type, "%s", again.Raw)
		require.True(t, again.Duplicate)
	}
	busy := tab.Chat("r2", "work on it")
	require.Equal(t, "ack", busy.Type, "%s", busy.Raw)
	tab.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RunID == busy.RunID })

	other := wstest.Dial(t, wsURL, nil)
	other.Token = alice
	other.Hello("")
	for i := range 5 {
		reply := other.Chat(fmt.Sprintf("over-%d", i), "hi")
		require.Equal(t, "rate_limited", reply.Code, "%s", reply.Raw)
	}
	require.Len(t, llm.Requests(), 2, "only the runs that started called the model")
}
