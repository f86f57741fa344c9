package openai_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/openai"
	"github.com/chatd/chatd/chat"
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
	evs, err := agenttest.Collect(t, newModel(t, srv), req)
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
	_, err = agenttest.Collect(t, m, hi())
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
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
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
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		callEvent("call_a", "read_file", argsA),
		callEvent("call_b", "search", argsB),
		usageEvent(12, 5),
	}, evs)
}

// Ollama streams every call of a parallel batch whole, each with its own id, all at
// index 0 (ollama/ollama#15457): a new id at an index begins a new call.
func TestParallelCallsAllAtIndexZero(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls",
		delta(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}]}`),
		delta(`{"tool_calls":[{"index":0,"id":"call_b","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Oslo\"}"}}]}`),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		callEvent("call_a", "get_weather", `{"location":"Paris"}`),
		callEvent("call_b", "get_weather", `{"location":"Oslo"}`),
		usageEvent(12, 5),
	}, evs)
}

// Some servers repeat the call's id on every fragment: the same id continues the call.
func TestToolCallIDRepeatedOnEveryFragment(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls",
		delta(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"loc"}}]}`),
		delta(`{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"arguments":"ation\":\"Paris\"}"}}]}`),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{callEvent("call_a", "get_weather", `{"location":"Paris"}`), usageEvent(12, 5)}, evs)
}

// Fragments without an index continue the latest call; a new id begins the next one.
func TestToolCallFragmentsWithoutIndex(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls",
		delta(`{"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"location\":"}}]}`),
		delta(`{"tool_calls":[{"function":{"arguments":"\"Paris\"}"}}]}`),
		delta(`{"tool_calls":[{"id":"call_b","type":"function","function":{"name":"current_time","arguments":""}}]}`),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		callEvent("call_a", "get_weather", `{"location":"Paris"}`),
		callEvent("call_b", "current_time", `{}`),
		usageEvent(12, 5),
	}, evs)
}

func TestToolCallWithoutArgumentsGetsAnEmptyObject(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_calls", callStart(0, "call_1", "current_time")))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
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
			evs, err := agenttest.Collect(t, newModel(t, srv), hi())
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
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
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
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, text("I can't help with that."), evs[0])
}

func TestContentFilterFinishIsAnError(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("content_filter", content("Sure, here")))
	_, err := agenttest.Collect(t, newModel(t, srv), hi())
	agenttest.ExpectModelError(t, err, agent.CodeContentFilter, false)
}

// The history goes out as the API wants it: the assistant's text and calls in one
// message, each result as a tool message, reasoning as reasoning_content only on a
// message with calls (DeepSeek's thinking mode requires it there), and a call whose
// garbled arguments were stored as a string sent back as the text the model wrote.
func TestHistoryIsSentInChatCompletionsShape(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("Done.")))
	req := agent.ModelRequest{Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "weather?"},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "thinking"}, {Redacted: "opaque"}, {Text: "more"}}, Text: "Let me look.", ToolCalls: []agent.ToolCall{
			{ID: "c1", Name: "weather", Input: json.RawMessage(`{"city":"Paris"}`)},
			{ID: "c2", Name: "weather", Input: json.RawMessage(`"{\"city\": Oslo"`)},
		}},
		{Role: agent.RoleTool, ToolCallID: "c1", ToolName: "weather", Result: "sunny"},
		{Role: agent.RoleTool, ToolCallID: "c2", ToolName: "weather", Result: "invalid input", IsError: true},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "Paris is sunny."}}, Text: "Sunny in Paris."},
		{Role: agent.RoleUser, Text: "and Oslo?"},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "only thoughts"}}},
		{Role: agent.RoleUser, Text: "and now?"},
	}}
	_, err := agenttest.Collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	msgs, err := json.Marshal(srv.Body(0)["messages"])
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":"Let me look.","reasoning_content":"thinking\nmore","tool_calls":[
			{"id":"c1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}},
			{"id":"c2","type":"function","function":{"name":"weather","arguments":"{\"city\": Oslo"}}
		]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"},
		{"role":"tool","tool_call_id":"c2","content":"invalid input"},
		{"role":"assistant","content":"Sunny in Paris."},
		{"role":"user","content":"and Oslo?"},
		{"role":"user","content":"and now?"}
	]`, string(msgs))
}

// --- Failures ----------------------------------------------------------------------------

func TestStreamCutMidWay(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Cut(agenttest.Data(delta(`{"role":"assistant","content":""}`), content("Half an"))...))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Half an")}, evs)
	agenttest.ExpectModelError(t, err, agent.CodeStreamCut, true)
}

// A stream that ends cleanly but never said it was finished is cut too.
func TestStreamEndingWithoutFinishReason(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Half"), "[DONE]")...))
	_, err := agenttest.Collect(t, newModel(t, srv), hi())
	agenttest.ExpectModelError(t, err, agent.CodeStreamCut, true)
}

func TestMalformedChunk(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Fine so far"), `{"choices":[{"index":0,"delta":{"content":"bro`, finish("stop"), "[DONE]")...))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Fine so far")}, evs)
	me := agenttest.ExpectModelError(t, err, agent.CodeBadResponse, false)
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
		// vLLM and OpenRouter put the HTTP status in code.
		{`{"error":{"object":"error","message":"This model's maximum context length is 8192 tokens","type":"BadRequestError","param":null,"code":400}}`, agent.CodeContextTooLong, false},
		{`{"error":{"message":"No auth credentials found","code":401}}`, agent.CodeModelAuth, false},
		{`{"error":{"message":"Provider returned error","code":502}}`, agent.CodeModelUnavailable, true},
		{`{"error":{"message":"Something odd","type":"BadRequestError","code":42}}`, agent.CodeModelUnavailable, true},
	}
	for _, c := range cases {
		t.Run(c.code, func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.SSE(agenttest.Data(content("Start"), c.data)...))
			evs, err := agenttest.Collect(t, newModel(t, srv), hi())
			require.Equal(t, []agent.ModelEvent{text("Start")}, evs)
			agenttest.ExpectModelError(t, err, c.code, c.transient)
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
		{429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, agent.CodeModelQuota, false},
		{500, body("server_error", "oops"), agent.CodeModelUnavailable, true},
		{503, `upstream unavailable`, agent.CodeModelUnavailable, true},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.code, "_", "-"), func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.Status(c.status, c.body))
			_, err := agenttest.Collect(t, newModel(t, srv), hi())
			me := agenttest.ExpectModelError(t, err, c.code, c.transient)
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
	_, err = agenttest.Collect(t, m, hi())
	agenttest.ExpectModelError(t, err, agent.CodeModelUnreachable, true)
}

// The SDK's own environment variables do not reach the requests: an OPENAI_BASE_URL
// set but empty (docker-compose passes an unset ${VAR} so) no longer empties the base
// URL, and organization, project and custom headers from the environment stay out.
// Not parallel: it sets the environment.
func TestSDKEnvironmentIsIgnored(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: yes")
	srv := agenttest.NewServer(t, answer("stop", content("ok")))
	_, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	h := srv.Requests()[0].Header
	require.Equal(t, "Bearer test-key", h.Get("Authorization"))
	for _, name := range []string{"OpenAI-Organization", "OpenAI-Project", "X-From-Env"} {
		require.Empty(t, h.Get(name), name)
	}
}

// roundTripper answers every request itself.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// With no base URL configured, calls go to OpenAI, whatever OPENAI_BASE_URL says.
// Not parallel: it sets the environment.
func TestNoBaseURLMeansOpenAI(t *testing.T) {
	t.Setenv("OPENAI_BASE_URL", "")
	var got *http.Request
	client := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		got = r
		return &http.Response{
			StatusCode: http.StatusUnauthorized,
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)),
			Request:    r,
		}, nil
	})}
	m, err := openai.New(openai.Config{APIKey: "sk-mine", Model: "gpt-4.1-mini", HTTPClient: client})
	require.NoError(t, err)
	_, err = agenttest.Collect(t, m, hi())
	agenttest.ExpectModelError(t, err, agent.CodeModelAuth, false)
	require.NotNil(t, got)
	require.Equal(t, "https://api.openai.com/v1/chat/completions", got.URL.String())
	require.Equal(t, "Bearer sk-mine", got.Header.Get("Authorization"))
}

// A base URL without its scheme fails the same way every time: not retried, and the
// user is told what to fix.
func TestBaseURLWithoutSchemeIsNotRetried(t *testing.T) {
	t.Parallel()
	m, err := openai.New(openai.Config{BaseURL: "localhost:11434/v1", Model: "llama3.2"})
	require.NoError(t, err)
	l, _ := agenttest.NewLoop(t, m)
	err = agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run")
	ce := agenttest.RunError(t, err)
	require.Equal(t, agent.CodeModelUnreachable, ce.Code)
	require.Equal(t, "the model provider's base URL is not usable: check its scheme (http:// or https://) and host", ce.Message)
}

func TestModelIsRequired(t *testing.T) {
	t.Parallel()
	_, err := openai.New(openai.Config{BaseURL: "http://localhost:1"})
	require.ErrorContains(t, err, "CHATD_MODEL")
}

// --- Through the agent loop --------------------------------------------------------------

// Text, a tool call, its result, then text: the second request carries the call and
// its result in the Chat Completions shape.
func TestTextToolCallTextThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		answer("tool_calls", content("Let me check."), callStart(0, "call_1", "get_weather"), callArgs(0, `{"loc`), callArgs(0, `ation":"Paris"}`)),
		answer("stop", content("It is "), content("sunny.")),
	)
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	require.NoError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, rec, "weather in Paris?"), "the run"))
	require.Equal(t, []string{
		"text: Let me check.",
		"usage: 12 5 17 64000",
		`tool.start: call_1 get_weather {"location":"Paris"}`,
		"tool.end: call_1 ok 15°C, sunny in Paris",
		"text: It is ",
		"text: sunny.",
		"usage: 12 5 17 64000",
	}, rec.Log())

	msgs, err := json.Marshal(srv.Body(1)["messages"])
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":"weather in Paris?"},
		{"role":"assistant","content":"Let me check.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}
		]},
		{"role":"tool","tool_call_id":"call_1","content":"15°C, sunny in Paris"}
	]`, string(msgs))
}

// DeepSeek's thinking mode answers 400 unless the reasoning of a step that called tools
// comes back with the results: the second request carries it as reasoning_content.
func TestReasoningGoesBackWithTheToolCalls(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		answer("tool_calls", delta(`{"reasoning_content":"Need the weather."}`), callStart(0, "call_1", "get_weather"), callArgs(0, `{"location":"Paris"}`)),
		answer("stop", content("sunny")),
	)
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	require.NoError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "weather?"), "the run"))
	msgs, err := json.Marshal(srv.Body(1)["messages"])
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":"weather?"},
		{"role":"assistant","reasoning_content":"Need the weather.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris\"}"}}
		]},
		{"role":"tool","tool_call_id":"call_1","content":"15°C, sunny in Paris"}
	]`, string(msgs))
}

// A tool call's arguments make no event until the call is complete, but every chunk of
// them is activity: a model streaming a long call over minutes, with no other output,
// is not hung up on by the loop's idle timeout (5 minutes here, on a fake clock).
func TestStreamingToolArgumentsKeepTheCallAlive(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	chunks := []string{callStart(0, "call_1", "get_weather")}
	for _, part := range []string{`{"lo`, `cat`, `ion"`, `:"`, `Pa`, `ris"}`} {
		chunks = append(chunks, callArgs(0, part))
	}
	srv := agenttest.NewServer(t,
		agenttest.Paced(next, agenttest.Data(append(chunks, finish("tool_calls"), usage(12, 5), "[DONE]")...)...),
		answer("stop", content("Sunny.")),
	)
	taken := make(chan struct{})
	reg, err := agent.NewRegistry(agenttest.Weather{})
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	l, err := agent.New(agent.Config{Model: agenttest.KeepAlives(newModel(t, srv), taken), Tools: reg, Clock: clock, MaxRetries: -1})
	require.NoError(t, err)
	rec := &agenttest.Recorder{}
	done := agenttest.Run(t.Context(), l, rec, "weather?")

	agenttest.Wait(t, taken, "the headers' keep-alive")
	// A chunk every 90s: 10.5 minutes in all. Each step stays well inside the timeout
	// (even if a chunk came in two reads and the test ran a step ahead).
	for range chunks {
		clock.Advance(90 * time.Second)
		agenttest.Give(t, next, struct{}{}, "the next chunk")
		agenttest.Wait(t, taken, "a keep-alive")
	}
	require.Empty(t, rec.Log(), "keep-alives are not output")
	close(next) // the rest at once

	require.NoError(t, agenttest.WaitKeepingAlive(t, done, taken), "log: %v", rec.Log())
	require.Equal(t, []string{
		"usage: 12 5 17 64000",
		`tool.start: call_1 get_weather {"location":"Paris"}`,
		"tool.end: call_1 ok 15°C, sunny in Paris",
		"text: Sunny.",
		"usage: 12 5 17 64000",
	}, rec.Log())
}

// A 429 with retry-after is waited out (on the loop's clock), then the call succeeds.
func TestRateLimitedThenSuccess(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		agenttest.Status(429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, "Retry-After", "3"),
		answer("stop", content("Finally.")),
	)
	l, clock := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	done := agenttest.Run(t.Context(), l, rec, "hi")

	agenttest.ExpectRetry(t, clock, srv, 1, 3*time.Second) // retry-after, not the 1s backoff

	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Len(t, srv.Requests(), 2)
	require.Equal(t, "Finally.", rec.Reply())
}

// 500 on every attempt: the loop retries twice (1s, then 2s) and gives up.
func TestServerErrorThreeTimesGivesUp(t *testing.T) {
	t.Parallel()
	fail := agenttest.Status(500, `{"error":{"message":"The server had an error","type":"server_error"}}`)
	srv := agenttest.NewServer(t, fail, fail, fail)
	l, clock := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	done := agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi")

	agenttest.ExpectRetry(t, clock, srv, 1, time.Second)
	agenttest.ExpectRetry(t, clock, srv, 2, 2*time.Second) // the backoff doubles
	err := agenttest.Wait(t, done, "the run")
	ce := agenttest.RunError(t, err)
	require.Equal(t, agent.CodeModelUnavailable, ce.Code)
	require.Equal(t, "the model provider failed (HTTP 500): The server had an error (gave up after 3 attempts)", ce.Message)
	require.Len(t, srv.Requests(), 3)
}

// A 429 for a spent quota is billing, not a rate limit: not retried, whatever its
// retry-after.
func TestQuotaExceededIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Status(429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, "Retry-After", "1"))
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	err := agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run")
	ce := agenttest.RunError(t, err)
	require.Equal(t, agent.CodeModelQuota, ce.Code)
	require.Equal(t, "the model provider's quota or credit is used up: check the plan and billing: You exceeded your current quota, please check your plan and billing details.", ce.Message)
	require.Len(t, srv.Requests(), 1)
}

// 401 is not retried, and the user sees what to fix, not the SDK's text.
func TestUnauthorizedIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Status(401, `{"error":{"message":"Incorrect API key provided: sk-xx***","type":"invalid_request_error","code":"invalid_api_key"}}`))
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	err := agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run")
	ce := agenttest.RunError(t, err)
	require.Equal(t, agent.CodeModelAuth, ce.Code)
	require.Equal(t, "the model provider refused the credentials: check the API key: Incorrect API key provided: sk-xx***", ce.Message)
	require.Len(t, srv.Requests(), 1)
}

// --- Continuing a cut-off answer ---------------------------------------------------------

// cutOff is a request to continue "what is it?"'s answer, cut off after text.
func cutOff(text string) agent.ModelRequest {
	return agent.ModelRequest{Continue: text, Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "what is it?"},
		{Role: agent.RoleAssistant, Text: text, Reasoning: []agent.Reasoning{{Text: "thought"}}},
	}}
}

func messages(t *testing.T, srv *agenttest.Server, i int) string {
	t.Helper()
	b, err := json.Marshal(srv.Body(i)["messages"])
	require.NoError(t, err)
	return string(b)
}

// Chat Completions cannot make a model continue its own message: the cut-off answer goes
// back as the assistant's message, and a user message asks for the rest, without
// repeating anything. The answer's opening space that repeats the cut-off text's
// trailing one is dropped; the rest streams as it comes. No server-specific field is
// sent.
func TestContinueAsksTheModelToGoOn(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content(" forty"), content("-two.")))
	evs, err := agenttest.Collect(t, newModel(t, srv), cutOff("The answer is "))
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{text("forty"), text("-two."), usageEvent(12, 5)}, evs)
	require.JSONEq(t, `[
		{"role":"user","content":"what is it?"},
		{"role":"assistant","content":"The answer is "},
		{"role":"user","content":"Your previous message was cut off. Continue it exactly where it stopped, without repeating anything it already says; if it stopped in the middle of a word, finish that word."}
	]`, messages(t, srv, 0))
	body := srv.Body(0)
	require.NotContains(t, body, "continue_final_message")
	require.NotContains(t, body, "add_generation_prompt")
}

// With ContinueFinalMessage (vLLM, llama.cpp's server) the request ends with the cut-off
// message, asks the server to continue it, and opens no new one.
func TestContinueFinalMessage(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("rty-two.")))
	m, err := openai.New(openai.Config{BaseURL: srv.URL + "/v1", APIKey: "test-key", Model: "gpt-test", ContinueFinalMessage: true})
	require.NoError(t, err)
	evs, err := agenttest.Collect(t, m, cutOff("The answer is fo"))
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{text("rty-two."), usageEvent(12, 5)}, evs)
	require.JSONEq(t, `[
		{"role":"user","content":"what is it?"},
		{"role":"assistant","content":"The answer is fo"}
	]`, messages(t, srv, 0))
	body := srv.Body(0)
	require.Equal(t, true, body["continue_final_message"])
	require.Equal(t, false, body["add_generation_prompt"])

	// A request that continues nothing carries neither field.
	srv2 := agenttest.NewServer(t, answer("stop", content("ok")))
	m2, err := openai.New(openai.Config{BaseURL: srv2.URL + "/v1", APIKey: "test-key", Model: "gpt-test", ContinueFinalMessage: true})
	require.NoError(t, err)
	_, err = agenttest.Collect(t, m2, hi())
	require.NoError(t, err)
	require.NotContains(t, srv2.Body(0), "continue_final_message")
	require.NotContains(t, srv2.Body(0), "add_generation_prompt")
}

// A run continued from a checkpoint that ends in cut-off text: the request carries it
// and the instruction, and only the rest streams.
func TestContinuedRunThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("stop", content("ny.")))
	l, _ := agenttest.NewLoop(t, newModel(t, srv))
	rec := &agenttest.Recorder{}
	checkpoint := []chat.Message{{Role: chat.RoleAssistant, Kind: chat.KindText, Content: "It is sun", Status: chat.MessageStreaming}}
	done := make(chan error, 1)
	go func() {
		done <- l.Run(t.Context(), conversation.Request{Content: "weather?", Checkpoint: checkpoint}, rec)
	}()
	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Equal(t, []string{"text: ny.", "usage: 12 5 17 64000"}, rec.Log())
	require.JSONEq(t, `[
		{"role":"user","content":"weather?"},
		{"role":"assistant","content":"It is sun"},
		{"role":"user","content":`+jsonString(agent.ContinueInstruction)+`}
	]`, messages(t, srv, 0))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
