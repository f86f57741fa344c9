package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/openai"
	"github.com/chatd/chatd/conversation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// --- The wire format: Chat Completions chunks as OpenAI documents them -------------------

func chunk(choice string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"gpt-test","choices":[` + choice + `]}`
}

func delta(d string) string {
	return chunk(`{"index":0,"delta":` + d + `,"logprobs":null,"finish_reason":null}`)
}

func content(text string) string {
	b, _ := json.Marshal(text)
	return delta(`{"content":` + string(b) + `}`)
}

func finish(reason string) string {
	return chunk(`{"index":0,"delta":{},"logprobs":null,"finish_reason":"` + reason + `"}`)
}

func usage(prompt, completion int) string {
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-test",
		"choices": []any{},
		"usage":   map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
	return string(b)
}

// callStart opens tool call index i; callArgs continues it.
func callStart(i int, id, name string) string {
	b, _ := json.Marshal(map[string]any{"tool_calls": []any{map[string]any{
		"index": i, "id": id, "type": "function", "function": map[string]string{"name": name, "arguments": ""},
	}}})
	return delta(string(b))
}

func callArgs(i int, args string) string {
	b, _ := json.Marshal(map[string]any{"tool_calls": []any{map[string]any{
		"index": i, "function": map[string]string{"arguments": args},
	}}})
	return delta(string(b))
}

// answer is a complete streamed response: the chunks, a finish reason, usage, [DONE].
func answer(reason string, chunks ...string) agenttest.Answer {
	all := append([]string{delta(`{"role":"assistant","content":""}`)}, chunks...)
	all = append(all, finish(reason), usage(12, 5), "[DONE]")
	return agenttest.SSE(agenttest.Data(all...)...)
}

func newModel(t *testing.T, srv *agenttest.Server) *openai.Model {
	t.Helper()
	m, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "gpt-test"})
	require.NoError(t, err)
	return m
}

// collect streams one call and returns its events.
func collect(t *testing.T, m agent.Model, req agent.ModelRequest) ([]agent.ModelEvent, error) {
	t.Helper()
	var evs []agent.ModelEvent
	err := m.Stream(context.Background(), req, func(ev agent.ModelEvent) error {
		evs = append(evs, ev)
		return nil
	})
	return evs, err
}

func hi() agent.ModelRequest {
	return agent.ModelRequest{Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}
}

func text(s string) agent.ModelEvent { return agent.ModelEvent{Kind: agent.EventText, Text: s} }

func usageEvent(in, out int64) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventUsage, Usage: agent.Usage{InputTokens: in, OutputTokens: out}}
}

func callEvent(id, name, input string) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: agent.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)}}
}

func modelError(t *testing.T, err error) *agent.ModelError {
	t.Helper()
	var me *agent.ModelError
	require.True(t, errors.As(err, &me), "want a *agent.ModelError, got %T: %v", err, err)
	return me
}

// --- Streaming ---------------------------------------------------------------------------

func TestPlainText(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("Hel"), content("lo"), content(" there.")))
	req := hi()
	req.System = "Be brief."
	req.Tools = []agent.ToolSpec{{
		Name: "lookup", Description: "Looks things up.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`),
	}}
	evs, err := collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{text("Hel"), text("lo"), text(" there."), usageEvent(12, 5)}, evs)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "POST", reqs[0].Method)
	require.Equal(t, "/v1/chat/completions", reqs[0].Path)
	require.Equal(t, "Bearer test-key", reqs[0].Header.Get("Authorization"))
	require.JSONEq(t, `{
		"model": "gpt-test",
		"stream": true,
		"stream_options": {"include_usage": true},
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "hi"}
		],
		"tools": [{"type": "function", "function": {
			"name": "lookup", "description": "Looks things up.",
			"parameters": {"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}
		}}]
	}`, string(reqs[0].Body))
}

func TestMaxTokensIsSent(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("ok")))
	m, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "gpt-test", MaxTokens: 300})
	require.NoError(t, err)
	_, err = collect(t, m, hi())
	require.NoError(t, err)
	require.EqualValues(t, 300, srv.Body(0)["max_completion_tokens"])
}

func TestTwoToolCallsInOneResponse(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls",
		content("Checking both."),
		callStart(0, "call_a", "weather"), callArgs(0, `{"city":"Paris"}`),
		callStart(1, "call_b", "weather"), callArgs(1, `{"city":"Oslo"}`),
	))
	evs, err := collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		text("Checking both."),
		callEvent("call_a", "weather", `{"city":"Paris"}`),
		callEvent("call_b", "weather", `{"city":"Oslo"}`),
		usageEvent(12, 5),
	}, evs)
}

// Arguments (and even names) arrive a few characters at a time, and parallel calls
// interleave their fragments by index.
func TestToolCallArgumentsSplitOverManyChunks(t *testing.T) {
	t.Parallel()
	argsA := `{"path":"/tmp/a b.txt","lines":[1,2,3],"note":"é ✓"}`
	argsB := `{"q":"x"}`
	chunks := []string{callStart(0, "call_a", "read_"), delta(`{"tool_calls":[{"index":0,"function":{"name":"file"}}]}`), callStart(1, "call_b", "search")}
	for i, r := range []rune(argsA) {
		chunks = append(chunks, callArgs(0, string(r)))
		if i < len(argsB) {
			chunks = append(chunks, callArgs(1, argsB[i:i+1]))
		}
	}
	srv := agenttest.NewServer(t, answer("tool_calls", chunks...))
	evs, err := collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		callEvent("call_a", "read_file", argsA),
		callEvent("call_b", "search", argsB),
		usageEvent(12, 5),
	}, evs)
}

func TestToolCallWithoutArgumentsGetsAnEmptyObject(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls", callStart(0, "call_1", "current_time")))
	evs, err := collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, callEvent("call_1", "current_time", `{}`), evs[0])
}

// Servers that think aloud send reasoning_content (DeepSeek, vLLM) or reasoning
// (OpenRouter, Ollama) in the delta: one reasoning block, closed when the answer begins.
func TestReasoningContent(t *testing.T) {
	t.Parallel()
	for _, field := range []string{"reasoning_content", "reasoning"} {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, answer("stop",
				delta(`{"`+field+`":"The user "}`), delta(`{"`+field+`":"greets me."}`),
				content("Hello!"),
			))
			evs, err := collect(t, newModel(t, srv), hi())
			require.NoError(t, err)
			require.Equal(t, []agent.ModelEvent{
				{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: "The user "}},
				{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: "greets me."}},
				{Kind: agent.EventReasoningEnd},
				text("Hello!"),
				usageEvent(12, 5),
			}, evs)
		})
	}
}

// Reasoning before tool calls with no text is closed at the end of the response.
func TestReasoningThenToolCall(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls",
		delta(`{"reasoning_content":"Need the time."}`),
		callStart(0, "c1", "current_time"), callArgs(0, `{}`),
	))
	evs, err := collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: "Need the time."}},
		{Kind: agent.EventReasoningEnd},
		callEvent("c1", "current_time", `{}`),
		usageEvent(12, 5),
	}, evs)
}

func TestRefusalIsShownAsText(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", delta(`{"refusal":"I can't help with that."}`)))
	evs, err := collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, text("I can't help with that."), evs[0])
}

func TestContentFilterFinishIsAnError(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("content_filter", content("Sure, here")))
	_, err := collect(t, newModel(t, srv), hi())
	me := modelError(t, err)
	require.Equal(t, agent.CodeContentFilter, me.Code)
	require.False(t, me.Transient)
}

// The history goes out as the API wants it: the assistant's text and calls in one
// message, each result as a tool message, reasoning left out, and a call whose garbled
// arguments were stored as a string sent back as the text the model wrote.
func TestHistoryIsSentInChatCompletionsShape(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("Done.")))
	req := agent.ModelRequest{Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "weather?"},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "thinking"}}, Text: "Let me look.", ToolCalls: []agent.ToolCall{
			{ID: "c1", Name: "weather", Input: json.RawMessage(`{"city":"Paris"}`)},
			{ID: "c2", Name: "weather", Input: json.RawMessage(`"{\"city\": Oslo"`)},
		}},
		{Role: agent.RoleTool, ToolCallID: "c1", ToolName: "weather", Result: "sunny"},
		{Role: agent.RoleTool, ToolCallID: "c2", ToolName: "weather", Result: "invalid input", IsError: true},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "only thoughts"}}},
		{Role: agent.RoleUser, Text: "and now?"},
	}}
	_, err := collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	msgs, err := json.Marshal(srv.Body(0)["messages"])
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":"Let me look.","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"c2","type":"function","function":{"name":"weather","arguments":"{\"city\": Oslo"}}
		]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"},
		{"role":"tool","tool_call_id":"c2","content":"invalid input"},
		{"role":"user","content":"and now?"}
	]`, string(msgs))
}

// --- Failures ----------------------------------------------------------------------------

func TestStreamCutMidWay(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Cut(agenttest.Data(delta(`{"role":"assistant","content":""}`), content("Half an"))...))
	evs, err := collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Half an")}, evs)
	me := modelError(t, err)
	require.Equal(t, agent.CodeStreamCut, me.Code)
	require.True(t, me.Transient)
}

// A stream that ends cleanly but never said it was finished is cut too.
func TestStreamEndingWithoutFinishReason(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Half"), "[DONE]")...))
	_, err := collect(t, newModel(t, srv), hi())
	me := modelError(t, err)
	require.Equal(t, agent.CodeStreamCut, me.Code)
	require.True(t, me.Transient)
}

func TestMalformedChunk(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Fine so far"), `{"choices":[{"index":0,"delta":{"content":"bro`, finish("stop"), "[DONE]")...))
	evs, err := collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Fine so far")}, evs)
	me := modelError(t, err)
	require.Equal(t, agent.CodeBadResponse, me.Code)
	require.False(t, me.Transient)
	require.Equal(t, "the model provider sent a malformed answer", me.Message)
}

func TestErrorEventMidStream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		data      string
		code      string
		transient bool
	}{
		{`{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":null}}`, agent.CodeModelUnavailable, true},
		{`{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, agent.CodeRateLimited, true},
		{`{"error":{"message":"Invalid 'messages': empty.","type":"invalid_request_error","code":null}}`, agent.CodeModelRejected, false},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Start"), c.data)...))
			evs, err := collect(t, newModel(t, srv), hi())
			require.Equal(t, []agent.ModelEvent{text("Start")}, evs)
			me := modelError(t, err)
			require.Equal(t, c.code, me.Code)
			require.Equal(t, c.transient, me.Transient)
		})
	}
}

func TestHTTPErrorsAreClassified(t *testing.T) {
	t.Parallel()
	body := func(typ, msg string) string {
		return `{"error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":null}}`
	}
	cases := []struct {
		status    int
		body      string
		code      string
		transient bool
	}{
		{400, body("invalid_request_error", "Unrecognized request argument"), agent.CodeModelRejected, false},
		{400, body("invalid_request_error", "This model's maximum context length is 8192 tokens."), agent.CodeContextTooLong, false},
		{401, body("invalid_request_error", "Incorrect API key provided"), agent.CodeModelAuth, false},
		{403, body("permission_denied", "no"), agent.CodeModelAuth, false},
		{404, body("invalid_request_error", "The model `gpt-nope` does not exist"), agent.CodeModelNotFound, false},
		{429, body("requests", "Rate limit reached"), agent.CodeRateLimited, true},
		{500, body("server_error", "oops"), agent.CodeModelUnavailable, true},
		{503, `upstream unavailable`, agent.CodeModelUnavailable, true},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.code, "_", "-"), func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.Status(c.status, c.body))
			_, err := collect(t, newModel(t, srv), hi())
			me := modelError(t, err)
			require.Equal(t, c.code, me.Code, "status %d", c.status)
			require.Equal(t, c.transient, me.Transient)
			require.NotContains(t, me.Message, srv.URL, "no raw SDK text for the user")
			require.NotContains(t, me.Message, "POST")
			require.Len(t, srv.Requests(), 1, "the SDK must not retry on its own")
		})
	}
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t)
	url := srv.URL
	srv.Close()
	m, err := openai.New(openai.Config{BaseURL: url, Model: "gpt-test"})
	require.NoError(t, err)
	_, err = collect(t, m, hi())
	me := modelError(t, err)
	require.Equal(t, agent.CodeModelUnreachable, me.Code)
	require.True(t, me.Transient)
}

func TestModelIsRequired(t *testing.T) {
	t.Parallel()
	_, err := openai.New(openai.Config{BaseURL: "http://localhost:1"})
	require.ErrorContains(t, err, "CHATD_MODEL")
}

// --- Through the agent loop --------------------------------------------------------------

type weather struct{}

func (weather) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "weather", Description: "Weather in a city.", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}
}

func (weather) Run(ctx context.Context, input json.RawMessage, env agent.Env) (string, error) {
	var in struct{ City string }
	if err := json.Unmarshal(input, &in); err != nil {
		return "", err
	}
	return "sunny in " + in.City, nil
}

// loop returns the agent loop on m with the weather tool and a fake clock.
func loop(t *testing.T, m agent.Model) (*agent.Loop, *clockwork.FakeClock) {
	t.Helper()
	reg, err := agent.NewRegistry(weather{})
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	l, err := agent.New(agent.Config{Model: m, Tools: reg, Clock: clock, ModelIdleTimeout: -1, ContextTokens: 1000})
	require.NoError(t, err)
	return l, clock
}

// runLoop runs one user message in the background and returns its result channel.
func runLoop(l *agent.Loop, rec *agenttest.Recorder, content string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Run(context.Background(), conversation.Request{Content: content}, rec) }()
	return done
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Text, a tool call, its result, then text: the second request carries the call and
// its result in the Chat Completions shape.
func TestTextToolCallTextThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		answer("tool_calls", content("Let me check."), callStart(0, "call_1", "weather"), callArgs(0, `{"ci`), callArgs(0, `ty":"Paris"}`)),
		answer("stop", content("It is "), content("sunny.")),
	)
	l, _ := loop(t, newModel(t, srv))
	rec := &agenttest.Recorder{}
	require.NoError(t, wait(t, runLoop(l, rec, "weather in Paris?"), "the run"))
	require.Equal(t, []string{
		"text: Let me check.",
		"usage: 12 5 17 1000",
		`tool.start: call_1 weather {"city":"Paris"}`,
		"tool.end: call_1 ok sunny in Paris",
		"text: It is ",
		"text: sunny.",
		"usage: 12 5 17 1000",
	}, rec.Log())

	msgs, err := json.Marshal(srv.Body(1)["messages"])
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":"weather in Paris?"},
		{"role":"assistant","content":"Let me check.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}
		]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny in Paris"}
	]`, string(msgs))
}

// A 429 with retry-after is waited out (on the loop's clock), then the call succeeds.
func TestRateLimitedThenSuccess(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		agenttest.Status(429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "3"),
		answer("stop", content("Finally.")),
	)
	l, clock := loop(t, newModel(t, srv))
	rec := &agenttest.Recorder{}
	done := runLoop(l, rec, "hi")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the retry wait
	require.Len(t, srv.Requests(), 1)
	clock.Advance(3*time.Second - time.Millisecond) // past the 1s backoff, short of retry-after
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "retried before retry-after")
	require.Len(t, srv.Requests(), 1)
	clock.Advance(time.Millisecond)

	require.NoError(t, wait(t, done, "the run"))
	require.Len(t, srv.Requests(), 2)
	require.Equal(t, "Finally.", rec.Reply())
}

// 500 on every attempt: the loop retries twice (1s, then 2s) and gives up.
func TestServerErrorThreeTimesGivesUp(t *testing.T) {
	t.Parallel()
	fail := agenttest.Status(500, `{"error":{"message":"The server had an error","type":"server_error"}}`)
	srv := agenttest.NewServer(t, fail, fail, fail)
	l, clock := loop(t, newModel(t, srv))
	done := runLoop(l, &agenttest.Recorder{}, "hi")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		require.Len(t, srv.Requests(), i+1)
		clock.Advance(backoff)
	}
	err := wait(t, done, "the run")
	var ce *conversation.Error
	require.True(t, errors.As(err, &ce), "%T: %v", err, err)
	require.Equal(t, agent.CodeModelUnavailable, ce.Code)
	require.Equal(t, "the model provider failed (HTTP 500): The server had an error (gave up after 3 attempts)", ce.Message)
	require.Len(t, srv.Requests(), 3)
}

// 401 is not retried, and the user sees what to fix, not the SDK's text.
func TestUnauthorizedIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Status(401, `{"error":{"message":"Incorrect API key provided: sk-xx***","type":"invalid_request_error","code":"invalid_api_key"}}`))
	l, _ := loop(t, newModel(t, srv))
	err := wait(t, runLoop(l, &agenttest.Recorder{}, "hi"), "the run")
	var ce *conversation.Error
	require.True(t, errors.As(err, &ce), "%T: %v", err, err)
	require.Equal(t, agent.CodeModelAuth, ce.Code)
	require.Equal(t, "the model provider refused the credentials: check the API key: Incorrect API key provided: sk-xx***", ce.Message)
	require.Len(t, srv.Requests(), 1)
}
