package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/anthropic"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// --- The wire format: Messages API server-sent events as Anthropic documents them -------

// ev is one named event with a JSON payload.
func ev(name string, payload any) agenttest.Event {
	b, err := json.Marshal(payload)
	if err != nil {
		panic(err)
	}
	return agenttest.Event{Name: name, Data: string(b)}
}

type obj = map[string]any

// The usage every scripted answer reports: 25 fresh input tokens, 100 written to the
// cache, 50 read from it, 1 output token at the start and 15 at the end.
const (
	inputTokens   = 25
	cacheCreation = 100
	cacheRead     = 50
	outputTokens  = 15
	promptTokens  = inputTokens + cacheCreation + cacheRead // what the model saw
)

func messageStart() agenttest.Event {
	return ev("message_start", obj{"type": "message_start", "message": obj{
		"id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant", "model": "claude-test",
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": obj{
			"input_tokens": inputTokens, "output_tokens": 1,
			"cache_creation_input_tokens": cacheCreation, "cache_read_input_tokens": cacheRead,
		},
	}})
}

func ping() agenttest.Event { return ev("ping", obj{"type": "ping"}) }

func blockStart(i int, block obj) agenttest.Event {
	return ev("content_block_start", obj{"type": "content_block_start", "index": i, "content_block": block})
}

func blockDelta(i int, delta obj) agenttest.Event {
	return ev("content_block_delta", obj{"type": "content_block_delta", "index": i, "delta": delta})
}

func blockStop(i int) agenttest.Event {
	return ev("content_block_stop", obj{"type": "content_block_stop", "index": i})
}

func messageDelta(stop string, output int) agenttest.Event {
	return ev("message_delta", obj{"type": "message_delta",
		"delta": obj{"stop_reason": stop, "stop_sequence": nil},
		"usage": obj{"output_tokens": output},
	})
}

func messageStop() agenttest.Event { return ev("message_stop", obj{"type": "message_stop"}) }

func errorEvent(kind, message string) agenttest.Event {
	return ev("error", obj{"type": "error", "error": obj{"type": kind, "message": message}})
}

func textDelta(i int, s string) agenttest.Event {
	return blockDelta(i, obj{"type": "text_delta", "text": s})
}

// textBlock is content block i: text, in pieces.
func textBlock(i int, pieces ...string) []agenttest.Event {
	evs := []agenttest.Event{blockStart(i, obj{"type": "text", "text": ""})}
	for _, p := range pieces {
		evs = append(evs, textDelta(i, p))
	}
	return append(evs, blockStop(i))
}

// toolBlock is content block i: a tool_use whose input arrives as the fragments.
func toolBlock(i int, id, name string, fragments ...string) []agenttest.Event {
	evs := []agenttest.Event{blockStart(i, obj{"type": "tool_use", "id": id, "name": name, "input": obj{}})}
	for _, f := range fragments {
		evs = append(evs, blockDelta(i, obj{"type": "input_json_delta", "partial_json": f}))
	}
	return append(evs, blockStop(i))
}

// thinkingBlock is content block i: thinking in pieces, then its signature.
func thinkingBlock(i int, signature string, pieces ...string) []agenttest.Event {
	evs := []agenttest.Event{blockStart(i, obj{"type": "thinking", "thinking": "", "signature": ""})}
	for _, p := range pieces {
		evs = append(evs, blockDelta(i, obj{"type": "thinking_delta", "thinking": p}))
	}
	evs = append(evs, blockDelta(i, obj{"type": "signature_delta", "signature": signature}))
	return append(evs, blockStop(i))
}

func redactedBlock(i int, data string) []agenttest.Event {
	return []agenttest.Event{blockStart(i, obj{"type": "redacted_thinking", "data": data}), blockStop(i)}
}

// events is a whole response: message_start, a ping, the blocks, message_delta with the
// stop reason, message_stop.
func events(stop string, blocks ...[]agenttest.Event) []agenttest.Event {
	evs := []agenttest.Event{messageStart(), ping()}
	for _, b := range blocks {
		evs = append(evs, b...)
	}
	return append(evs, messageDelta(stop, outputTokens), messageStop())
}

func answer(stop string, blocks ...[]agenttest.Event) agenttest.Answer {
	return agenttest.SSE(events(stop, blocks...)...)
}

func apiError(kind, message string) string {
	b, _ := json.Marshal(obj{"type": "error", "error": obj{"type": kind, "message": message}})
	return string(b)
}

// --- Helpers -----------------------------------------------------------------------------

func newModel(t *testing.T, srv *agenttest.Server) *anthropic.Model {
	t.Helper()
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "test-key", Model: "claude-test"})
	require.NoError(t, err)
	return m
}

func hi() agent.ModelRequest {
	return agent.ModelRequest{Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}
}

func text(s string) agent.ModelEvent { return agent.ModelEvent{Kind: agent.EventText, Text: s} }

func thought(s string) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: s}}
}

func usage() agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventUsage, Usage: agent.Usage{InputTokens: promptTokens, OutputTokens: outputTokens}}
}

func callEvent(id, name, input string) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: agent.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)}}
}

// usageLine is the recorder's line for usage(): input, output, context, window.
var usageLine = fmt.Sprintf("usage: %d %d %d %d", promptTokens, outputTokens, promptTokens+outputTokens, agent.DefaultContextTokens)

// field marshals part of a request body back to JSON, for JSONEq.
func field(t *testing.T, body map[string]any, key string) string {
	t.Helper()
	v, ok := body[key]
	require.True(t, ok, "the request has no %q", key)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// --- Streaming ---------------------------------------------------------------------------

// Text deltas come out as they arrive, then the call's usage: the whole prompt (cached
// parts included) and the output count of message_delta. The request is the documented
// Messages call.
func TestPlainText(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "Hel", "lo", " there.")))
	req := hi()
	req.System = "Be brief."
	req.Tools = []agent.ToolSpec{{
		Name: "lookup", Description: "Looks things up.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"],"additionalProperties":false,"$defs":{"x":{"type":"integer"}}}`),
	}, {
		Name: "now", InputSchema: json.RawMessage(`{"type":"object"}`),
	}}
	evs, err := agenttest.Collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{text("Hel"), text("lo"), text(" there."), usage()}, evs)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "POST", reqs[0].Method)
	require.Equal(t, "/v1/messages", reqs[0].Path)
	require.Equal(t, "test-key", reqs[0].Header.Get("X-Api-Key"))
	require.Empty(t, reqs[0].Header.Get("Authorization"))
	require.NotEmpty(t, reqs[0].Header.Get("Anthropic-Version"))
	require.JSONEq(t, `{
		"model": "claude-test",
		"max_tokens": 8192,
		"stream": true,
		"system": [{"type": "text", "text": "Be brief."}],
		"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
		"tools": [
			{"name": "lookup", "description": "Looks things up.", "input_schema": {
				"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
				"additionalProperties": false, "$defs": {"x": {"type": "integer"}}
			}},
			{"name": "now", "input_schema": {"type": "object"}}
		]
	}`, string(reqs[0].Body))
}

// With no system prompt and no tools the request has neither; MaxTokens is sent as set.
func TestMinimalRequest(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "ok")))
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "test-key", Model: "claude-test", MaxTokens: 300})
	require.NoError(t, err)
	req := hi()
	req.System = "  \n"
	_, err = agenttest.Collect(t, m, req)
	require.NoError(t, err)
	require.JSONEq(t, `{
		"model": "claude-test",
		"max_tokens": 300,
		"stream": true,
		"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
	}`, string(srv.Requests()[0].Body))
}

// message_delta's usage is cumulative: newer API versions repeat the input counts there,
// and those win over message_start's.
func TestUsageFromMessageDelta(t *testing.T) {
	t.Parallel()
	evs := append([]agenttest.Event{messageStart()}, textBlock(0, "ok")...)
	evs = append(evs,
		ev("message_delta", obj{"type": "message_delta",
			"delta": obj{"stop_reason": "end_turn", "stop_sequence": nil},
			"usage": obj{"input_tokens": 30, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 7, "output_tokens": 42},
		}),
		messageStop(),
	)
	srv := agenttest.NewServer(t, agenttest.SSE(evs...))
	got, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		text("ok"),
		{Kind: agent.EventUsage, Usage: agent.Usage{InputTokens: 237, OutputTokens: 42}},
	}, got)
}

func TestTwoToolUseBlocksInOneResponse(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("tool_use",
		textBlock(0, "Checking both."),
		toolBlock(1, "toolu_01A", "get_weather", `{"location":`, ` "Paris"}`),
		toolBlock(2, "toolu_01B", "get_weather", `{"location": "Oslo"}`),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		text("Checking both."),
		callEvent("toolu_01A", "get_weather", `{"location": "Paris"}`),
		callEvent("toolu_01B", "get_weather", `{"location": "Oslo"}`),
		usage(),
	}, evs)
}

// Input arrives a character at a time (multi-byte ones included) and is put back
// together exactly; a tool_use with no input deltas gets {}.
func TestToolInputSplitOverManyChunks(t *testing.T) {
	t.Parallel()
	input := `{"path": "/tmp/a b.txt", "lines": [1, 2, 3], "note": "é ✓ \"quoted\""}`
	var fragments []string
	for _, r := range input {
		fragments = append(fragments, string(r))
	}
	srv := agenttest.NewServer(t, answer("tool_use",
		toolBlock(0, "toolu_01", "read_file", fragments...),
		toolBlock(1, "toolu_02", "current_time"),
		toolBlock(2, "toolu_03", "current_time", ""),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		callEvent("toolu_01", "read_file", input),
		callEvent("toolu_02", "current_time", `{}`),
		callEvent("toolu_03", "current_time", `{}`),
		usage(),
	}, evs)
}

// Thinking streams as reasoning pieces and ends with its signature; a redacted block
// ends at once with its data.
func TestThinkingAndRedactedThinking(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn",
		thinkingBlock(0, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds", "Let me ", "think."),
		redactedBlock(1, "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
		textBlock(2, "Answer."),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		thought("Let me "),
		thought("think."),
		{Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}},
		{Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Redacted: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}},
		text("Answer."),
		usage(),
	}, evs)
}

// A signature sent in several deltas is joined.
func TestSignatureInSeveralDeltas(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn",
		[]agenttest.Event{
			blockStart(0, obj{"type": "thinking", "thinking": "", "signature": ""}),
			blockDelta(0, obj{"type": "thinking_delta", "thinking": "Hmm."}),
			blockDelta(0, obj{"type": "signature_delta", "signature": "abc"}),
			blockDelta(0, obj{"type": "signature_delta", "signature": "def"}),
			blockStop(0),
		},
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		thought("Hmm."),
		{Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Signature: "abcdef"}},
		usage(),
	}, evs)
}

func TestThinkingBudgetIsSent(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "ok")))
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "test-key", Model: "claude-test", MaxTokens: 16000, ThinkingBudget: 2048})
	require.NoError(t, err)
	_, err = agenttest.Collect(t, m, hi())
	require.NoError(t, err)
	body := srv.Body(0)
	require.JSONEq(t, `{"type":"enabled","budget_tokens":2048}`, field(t, body, "thinking"))
	require.EqualValues(t, 16000, body["max_tokens"])
}

// The history goes out as the Messages API wants it: user text as text blocks (empty
// ones left out), an assistant's signed thinking and redacted thinking first, then its
// text, then its tool_use blocks; unsigned reasoning is dropped (the API would refuse
// it), an assistant message left empty by that too; the results of one step are the
// tool_result blocks of one user message, in order; a call whose garbled input was
// stored as a string goes back wrapped in an object.
func TestHistoryIsSentInMessagesShape(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "Done.")))
	req := agent.ModelRequest{Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "weather?"},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "unsigned"}, {Text: "signed", Signature: "sig"}, {Redacted: "opaque"}}, Text: "Let me look.", ToolCalls: []agent.ToolCall{
			{ID: "toolu_1", Name: "get_weather", Input: json.RawMessage(`{"location":"Paris"}`)},
			{ID: "toolu_2", Name: "get_weather", Input: json.RawMessage(`"{\"location\": Oslo"`)},
		}},
		{Role: agent.RoleTool, ToolCallID: "toolu_1", ToolName: "get_weather", Result: "sunny"},
		{Role: agent.RoleTool, ToolCallID: "toolu_2", ToolName: "get_weather", Result: "the tool input is not valid JSON", IsError: true},
		{Role: agent.RoleAssistant, Text: "It is sunny in Paris."},
		{Role: agent.RoleUser, Text: " "},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "x"}}},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Text: "x"}}, Text: "Anything else?"},
		{Role: agent.RoleUser, Text: "and now?"},
	}}
	_, err := agenttest.Collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"weather?"}]},
		{"role":"assistant","content":[
			{"type":"thinking","thinking":"signed","signature":"sig"},
			{"type":"redacted_thinking","data":"opaque"},
			{"type":"text","text":"Let me look."},
			{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"Paris"}},
			{"type":"tool_use","id":"toolu_2","name":"get_weather","input":{"invalid_input":"{\"location\": Oslo"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny"}],"is_error":false},
			{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"the tool input is not valid JSON"}],"is_error":true}
		]},
		{"role":"assistant","content":[{"type":"text","text":"It is sunny in Paris."}]},
		{"role":"assistant","content":[{"type":"text","text":"Anything else?"}]},
		{"role":"user","content":[{"type":"text","text":"and now?"}]}
	]`, field(t, srv.Body(0), "messages"))
}

// A tool that printed nothing (or only white space): the API refuses empty text blocks,
// so the tool_result goes without content.
func TestEmptyToolResultHasNoEmptyTextBlock(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "Done.")))
	req := agent.ModelRequest{Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "touch it"},
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{
			{ID: "toolu_1", Name: "touch", Input: json.RawMessage(`{}`)},
			{ID: "toolu_2", Name: "touch", Input: json.RawMessage(`{}`)},
		}},
		{Role: agent.RoleTool, ToolCallID: "toolu_1", ToolName: "touch", Result: ""},
		{Role: agent.RoleTool, ToolCallID: "toolu_2", ToolName: "touch", Result: " \n"},
	}}
	_, err := agenttest.Collect(t, newModel(t, srv), req)
	require.NoError(t, err)
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"touch it"}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"toolu_1","name":"touch","input":{}},
			{"type":"tool_use","id":"toolu_2","name":"touch","input":{}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_1","is_error":false},
			{"type":"tool_result","tool_use_id":"toolu_2","is_error":false}
		]}
	]`, field(t, srv.Body(0), "messages"))
}

func TestRefusalIsAContentFilterError(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("refusal", textBlock(0, "I can")))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("I can")}, evs)
	me := agenttest.ExpectModelError(t, err, agent.CodeContentFilter, false)
	require.Equal(t, "the model declined to answer under its content policy", me.Message)
}

func TestContextWindowExceededStop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("model_context_window_exceeded", textBlock(0, "Part")))
	_, err := agenttest.Collect(t, newModel(t, srv), hi())
	agenttest.ExpectModelError(t, err, agent.CodeContextTooLong, false)
}

// An emit error stops the stream and is returned as it is.
func TestEmitErrorStopsTheStream(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "one", "two")))
	stop := errors.New("stop here")
	var got []agent.ModelEvent
	err := newModel(t, srv).Stream(t.Context(), hi(), func(ev agent.ModelEvent) error {
		if ev.Kind == agent.EventKeepAlive {
			return nil
		}
		got = append(got, ev)
		return stop
	})
	require.ErrorIs(t, err, stop)
	require.Equal(t, []agent.ModelEvent{text("one")}, got)
}

// A tool call's input_json_delta fragments and the pings between them make no event (the
// SDK swallows pings), but they are activity: a model streaming a long call over minutes
// is not hung up on by the loop's idle timeout (5 minutes here, on a fake clock).
func TestPingsAndToolInputKeepTheCallAlive(t *testing.T) {
	t.Parallel()
	next := make(chan struct{})
	first := []agenttest.Event{messageStart(), ping(), blockStart(0, obj{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": obj{}})}
	for _, part := range []string{`{"lo`, `cation"`, `:"Paris"}`} {
		first = append(first, ping(), blockDelta(0, obj{"type": "input_json_delta", "partial_json": part}))
	}
	rest := []agenttest.Event{blockStop(0), messageDelta("tool_use", outputTokens), messageStop()}
	srv := agenttest.NewServer(t,
		agenttest.Paced(next, append(first, rest...)...),
		answer("end_turn", textBlock(0, "Sunny.")),
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
	// An event every 90s: 13.5 minutes in all. Each step stays well inside the timeout
	// (even if an event came in two reads and the test ran a step ahead).
	for range first {
		clock.Advance(90 * time.Second)
		agenttest.Give(t, next, struct{}{}, "the next event")
		agenttest.Wait(t, taken, "a keep-alive")
	}
	require.Empty(t, rec.Log(), "keep-alives are not output")
	close(next) // the rest at once

	require.NoError(t, agenttest.WaitKeepingAlive(t, done, taken), "log: %v", rec.Log())
	require.Equal(t, []string{
		"usage: 175 15 190 64000",
		`tool.start: toolu_1 get_weather {"location":"Paris"}`,
		"tool.end: toolu_1 ok 15°C, sunny in Paris",
		"text: Sunny.",
		"usage: 175 15 190 64000",
	}, rec.Log())
}

// --- Failures ----------------------------------------------------------------------------

func TestStreamCutMidWay(t *testing.T) {
	t.Parallel()
	start := []agenttest.Event{messageStart(), blockStart(0, obj{"type": "text", "text": ""}), textDelta(0, "Half "), textDelta(0, "an")}
	srv := agenttest.NewServer(t, agenttest.Cut(start...))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Half "), text("an")}, evs)
	agenttest.ExpectModelError(t, err, agent.CodeStreamCut, true)
}

// A stream that ends cleanly but never sent message_stop is cut too, and reports no
// usage.
func TestStreamEndingWithoutMessageStop(t *testing.T) {
	t.Parallel()
	all := events("end_turn", textBlock(0, "Half"))
	srv := agenttest.NewServer(t, agenttest.SSE(all[:len(all)-1]...))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Half")}, evs)
	agenttest.ExpectModelError(t, err, agent.CodeStreamCut, true)
}

func TestMalformedChunk(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(
		messageStart(), blockStart(0, obj{"type": "text", "text": ""}), textDelta(0, "Fine so far"),
		agenttest.Event{Name: "content_block_delta", Data: `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"bro`},
		textDelta(0, "never seen"), blockStop(0), messageDelta("end_turn", 5), messageStop(),
	))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Equal(t, []agent.ModelEvent{text("Fine so far")}, evs)
	me := agenttest.ExpectModelError(t, err, agent.CodeBadResponse, false)
	require.Equal(t, "the model provider sent a malformed answer", me.Message)
}

// An error event after some text: overload and the API's own errors are transient
// (although the loop does not retry once something streamed), a refused request not.
func TestErrorEventMidStream(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind, message string
		code          string
		transient     bool
		userMessage   string
	}{
		{"overloaded_error", "Overloaded", agent.CodeModelUnavailable, true, "the model provider is overloaded: Overloaded"},
		{"api_error", "Internal server error", agent.CodeModelUnavailable, true, "the model provider failed (HTTP 500): Internal server error"},
		{"rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", agent.CodeRateLimited, true, "the model provider is rate limiting requests: Number of request tokens has exceeded your per-minute rate limit"},
		{"invalid_request_error", "messages: roles must alternate", agent.CodeModelRejected, false, "the model provider rejected the request (HTTP 400): messages: roles must alternate"},
	}
	for _, c := range cases {
		t.Run(c.kind, func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.SSE(
				messageStart(), blockStart(0, obj{"type": "text", "text": ""}), textDelta(0, "Start"),
				errorEvent(c.kind, c.message),
			))
			evs, err := agenttest.Collect(t, newModel(t, srv), hi())
			require.Equal(t, []agent.ModelEvent{text("Start")}, evs)
			me := agenttest.ExpectModelError(t, err, c.code, c.transient)
			require.Equal(t, c.userMessage, me.Message)
			require.Contains(t, strings.ToLower(me.Message), strings.ToLower(c.message))
		})
	}
}

// An error event before anything else (the documented overload case) is transient.
func TestOverloadedErrorEventFirst(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.SSE(errorEvent("overloaded_error", "Overloaded")))
	evs, err := agenttest.Collect(t, newModel(t, srv), hi())
	require.Empty(t, evs)
	me := agenttest.ExpectModelError(t, err, agent.CodeModelUnavailable, true)
	require.Contains(t, me.Message, "overloaded")
}

func TestHTTPErrorsAreClassified(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		status    int
		body      string
		code      string
		transient bool
		message   string
	}{
		{"bad-request", 400, apiError("invalid_request_error", "max_tokens: Field required"), agent.CodeModelRejected, false,
			"the model provider rejected the request (HTTP 400): max_tokens: Field required"},
		{"prompt-too-long", 400, apiError("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"), agent.CodeContextTooLong, false,
			"the conversation is too long for the model: lower CHATD_CONTEXT_TOKENS: prompt is too long: 210000 tokens > 200000 maximum"},
		{"unauthorized", 401, apiError("authentication_error", "invalid x-api-key"), agent.CodeModelAuth, false,
			"the model provider refused the credentials: check the API key: invalid x-api-key"},
		{"forbidden", 403, apiError("permission_error", "Your API key does not have permission to use the specified resource."), agent.CodeModelAuth, false,
			"the model provider refused the credentials: check the API key: Your API key does not have permission to use the specified resource."},
		{"not-found", 404, apiError("not_found_error", "model: claude-nope"), agent.CodeModelNotFound, false,
			"the model or endpoint was not found: check CHATD_MODEL and the base URL: model: claude-nope"},
		{"too-large", 413, apiError("request_too_large", "Request exceeds the maximum allowed number of bytes."), agent.CodeContextTooLong, false,
			"the conversation is too long for the model: lower CHATD_CONTEXT_TOKENS: Request exceeds the maximum allowed number of bytes."},
		{"rate-limited", 429, apiError("rate_limit_error", "slow down"), agent.CodeRateLimited, true,
			"the model provider is rate limiting requests: slow down"},
		{"server-error", 500, apiError("api_error", "Internal server error"), agent.CodeModelUnavailable, true,
			"the model provider failed (HTTP 500): Internal server error"},
		{"not-json", 502, `<html>Bad Gateway</html>`, agent.CodeModelUnavailable, true,
			"the model provider failed (HTTP 502)"},
		{"overloaded", 529, apiError("overloaded_error", "Overloaded"), agent.CodeModelUnavailable, true,
			"the model provider is overloaded: Overloaded"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := agenttest.NewServer(t, agenttest.Status(c.status, c.body))
			evs, err := agenttest.Collect(t, newModel(t, srv), hi())
			require.Empty(t, evs)
			me := agenttest.ExpectModelError(t, err, c.code, c.transient)
			require.Equal(t, c.message, me.Message)
			require.NotContains(t, me.Message, srv.URL, "no raw SDK text for the user")
			require.NotContains(t, me.Message, "POST")
			require.Len(t, srv.Requests(), 1, "the SDK must not retry on its own")
		})
	}
}

func TestRetryAfterHeaderIsKept(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Status(429, apiError("rate_limit_error", "slow down"), "retry-after", "3"))
	_, err := agenttest.Collect(t, newModel(t, srv), hi())
	me := agenttest.ModelError(t, err)
	require.Equal(t, agent.CodeRateLimited, me.Code)
	require.Equal(t, 3*time.Second, me.RetryAfter)
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t)
	url := srv.URL
	srv.Close()
	m, err := anthropic.New(anthropic.Config{BaseURL: url, APIKey: "test-key", Model: "claude-test"})
	require.NoError(t, err)
	_, err = agenttest.Collect(t, m, hi())
	agenttest.ExpectModelError(t, err, agent.CodeModelUnreachable, true)
}

// A cancelled call returns the context's error, not a model error.
func TestCancelledCall(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	defer close(gate)
	srv := agenttest.NewServer(t, agenttest.Gated(gate,
		[]agenttest.Event{messageStart(), blockStart(0, obj{"type": "text", "text": ""}), textDelta(0, "Hel")},
		[]agenttest.Event{textDelta(0, "lo"), blockStop(0), messageDelta("end_turn", 2), messageStop()},
	))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var got []agent.ModelEvent
	err := newModel(t, srv).Stream(ctx, hi(), func(ev agent.ModelEvent) error {
		if ev.Kind == agent.EventKeepAlive {
			return nil
		}
		got = append(got, ev)
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, []agent.ModelEvent{text("Hel")}, got)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		cfg  anthropic.Config
		want string // "" for valid
	}{
		{"no model", anthropic.Config{}, "CHATD_MODEL"},
		{"negative max tokens", anthropic.Config{Model: "m", MaxTokens: -1}, "CHATD_MAX_TOKENS"},
		{"budget too small", anthropic.Config{Model: "m", ThinkingBudget: 1023}, "CHATD_THINKING_BUDGET"},
		{"negative budget", anthropic.Config{Model: "m", ThinkingBudget: -5}, "CHATD_THINKING_BUDGET"},
		{"budget equals default cap", anthropic.Config{Model: "m", ThinkingBudget: anthropic.DefaultMaxTokens}, "CHATD_THINKING_BUDGET"},
		{"budget above cap", anthropic.Config{Model: "m", MaxTokens: 2000, ThinkingBudget: 4096}, "CHATD_THINKING_BUDGET"},
		{"minimal", anthropic.Config{Model: "m"}, ""},
		{"smallest budget", anthropic.Config{Model: "m", ThinkingBudget: 1024}, ""},
		{"budget just under cap", anthropic.Config{Model: "m", MaxTokens: 2000, ThinkingBudget: 1999}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, err := anthropic.New(c.cfg)
			if c.want == "" {
				require.NoError(t, err)
				require.NotNil(t, m)
				return
			}
			require.ErrorContains(t, err, c.want)
			require.Nil(t, m)
		})
	}
}

// --- Through the agent loop --------------------------------------------------------------

// Text, a tool call whose input arrives in fragments, its result, then text: the second
// request carries the assistant's text and tool_use, and the tool_result in a user
// message.
func TestTextToolCallTextThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		answer("tool_use",
			textBlock(0, "Let me check ", "the weather."),
			toolBlock(1, "toolu_01A09q90qw90lq917835lq9", "get_weather", `{"locat`, `ion": "San Fra`, `ncisco, CA"`, `}`),
		),
		answer("end_turn", textBlock(0, "It is 15°C ", "and sunny.")),
	)
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	require.NoError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, rec, "What is the weather in San Francisco?"), "the run"))
	require.Equal(t, []string{
		"text: Let me check ",
		"text: the weather.",
		usageLine,
		`tool.start: toolu_01A09q90qw90lq917835lq9 get_weather {"location": "San Francisco, CA"}`,
		"tool.end: toolu_01A09q90qw90lq917835lq9 ok 15°C, sunny in San Francisco, CA",
		"text: It is 15°C ",
		"text: and sunny.",
		usageLine,
	}, rec.Log())

	require.Len(t, srv.Requests(), 2)
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"What is the weather in San Francisco?"}]}
	]`, field(t, srv.Body(0), "messages"))
	body := srv.Body(1)
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"What is the weather in San Francisco?"}]},
		{"role":"assistant","content":[
			{"type":"text","text":"Let me check the weather."},
			{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location":"San Francisco, CA"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_01A09q90qw90lq917835lq9","content":[{"type":"text","text":"15°C, sunny in San Francisco, CA"}],"is_error":false}
		]}
	]`, field(t, body, "messages"))
	require.JSONEq(t, `[{"name":"get_weather","description":"Get the current weather in a given location.",
		"input_schema":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}]`, field(t, body, "tools"))
}

// Two calls in one response run, and both results go back in one user message, in the
// calls' order.
func TestTwoToolCallsThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		answer("tool_use",
			toolBlock(0, "toolu_A", "get_weather", `{"location": "Paris"}`),
			toolBlock(1, "toolu_B", "get_weather", `{"location":`, ` "Oslo"}`),
		),
		answer("end_turn", textBlock(0, "Both sunny.")),
	)
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	require.NoError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, rec, "Paris and Oslo?"), "the run"))
	log := rec.Log()
	require.Len(t, log, 7, "%q", log)
	require.Equal(t, []string{
		usageLine,
		`tool.start: toolu_A get_weather {"location": "Paris"}`,
		`tool.start: toolu_B get_weather {"location": "Oslo"}`,
	}, log[:3])
	// The calls run at once: their ends come in either order.
	require.ElementsMatch(t, []string{
		"tool.end: toolu_A ok 15°C, sunny in Paris",
		"tool.end: toolu_B ok 15°C, sunny in Oslo",
	}, log[3:5])
	require.Equal(t, []string{"text: Both sunny.", usageLine}, log[5:])
	require.Equal(t, "Both sunny.", rec.Reply())

	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"Paris and Oslo?"}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"toolu_A","name":"get_weather","input":{"location":"Paris"}},
			{"type":"tool_use","id":"toolu_B","name":"get_weather","input":{"location":"Oslo"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_A","content":[{"type":"text","text":"15°C, sunny in Paris"}],"is_error":false},
			{"type":"tool_result","tool_use_id":"toolu_B","content":[{"type":"text","text":"15°C, sunny in Oslo"}],"is_error":false}
		]}
	]`, field(t, srv.Body(1), "messages"))
}

// Thinking before a tool call goes back with the tool result, signed and first in the
// assistant message, as the API requires when thinking is on.
func TestThinkingRoundTripThroughTheLoop(t *testing.T) {
	t.Parallel()
	const sig = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
	const redacted = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
	srv := agenttest.NewServer(t,
		answer("tool_use",
			thinkingBlock(0, sig, "I need ", "the weather."),
			redactedBlock(1, redacted),
			toolBlock(2, "toolu_T", "get_weather", `{"location": "Paris"}`),
		),
		answer("end_turn", textBlock(0, "Sunny.")),
	)
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "test-key", Model: "claude-test", MaxTokens: 16000, ThinkingBudget: 10000})
	require.NoError(t, err)
	l, _ := agenttest.NewLoop(t, m, agenttest.Weather{})
	rec := &agenttest.Recorder{}
	require.NoError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, rec, "Paris?"), "the run"))
	require.Equal(t, []string{
		"reasoning: I need ",
		"reasoning: the weather.",
		`reasoning.end: {"signature":"` + sig + `"}`,
		`reasoning.end: {"redacted":"` + redacted + `"}`,
		usageLine,
		`tool.start: toolu_T get_weather {"location": "Paris"}`,
		"tool.end: toolu_T ok 15°C, sunny in Paris",
		"text: Sunny.",
		usageLine,
	}, rec.Log())

	body := srv.Body(1)
	require.JSONEq(t, `{"type":"enabled","budget_tokens":10000}`, field(t, body, "thinking"))
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"Paris?"}]},
		{"role":"assistant","content":[
			{"type":"thinking","thinking":"I need the weather.","signature":"`+sig+`"},
			{"type":"redacted_thinking","data":"`+redacted+`"},
			{"type":"tool_use","id":"toolu_T","name":"get_weather","input":{"location":"Paris"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_T","content":[{"type":"text","text":"15°C, sunny in Paris"}],"is_error":false}
		]}
	]`, field(t, body, "messages"))
}

// A 429 with retry-after is waited out on the loop's clock, then the call succeeds.
func TestRateLimitedThenSuccess(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		agenttest.Status(429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, "retry-after", "3"),
		answer("end_turn", textBlock(0, "Finally", " here.")),
	)
	l, clock := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	done := agenttest.Run(t.Context(), l, rec, "hi")

	agenttest.ExpectRetry(t, clock, srv, 1, 3*time.Second) // retry-after, not the 1s backoff

	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Len(t, srv.Requests(), 2)
	require.Equal(t, "Finally here.", rec.Reply())
	require.Equal(t, []string{"text: Finally", "text:  here.", usageLine}, rec.Log())
	require.Equal(t, srv.Requests()[0].Body, srv.Requests()[1].Body, "the retry is the same request")
}

// 500 on every attempt: the loop retries twice (after 1s, then 2s) and gives up.
func TestServerErrorThreeTimesGivesUp(t *testing.T) {
	t.Parallel()
	fail := agenttest.Status(500, apiError("api_error", "Internal server error"))
	srv := agenttest.NewServer(t, fail, fail, fail)
	l, clock := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	done := agenttest.Run(t.Context(), l, rec, "hi")

	agenttest.ExpectRetry(t, clock, srv, 1, time.Second)
	agenttest.ExpectRetry(t, clock, srv, 2, 2*time.Second) // the backoff doubles
	err := agenttest.Wait(t, done, "the run")
	ce := agenttest.RunError(t, err)
	require.Equal(t, agent.CodeModelUnavailable, ce.Code)
	require.Equal(t, "the model provider failed (HTTP 500): Internal server error (gave up after 3 attempts)", ce.Message)
	require.True(t, strings.HasSuffix(ce.Message, "(gave up after 3 attempts)"))
	require.Len(t, srv.Requests(), 3)
	require.Empty(t, rec.Log())
}

// An overloaded stream (the error event before any output) is retried like a 529.
func TestOverloadedStreamIsRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t,
		agenttest.SSE(messageStart(), errorEvent("overloaded_error", "Overloaded")),
		answer("end_turn", textBlock(0, "Here.")),
	)
	l, clock := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	done := agenttest.Run(t.Context(), l, rec, "hi")
	agenttest.ExpectRetry(t, clock, srv, 1, time.Second)
	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Len(t, srv.Requests(), 2)
	require.Equal(t, "Here.", rec.Reply())
}

// Once text has streamed, a cut is not retried: the run fails with the cut.
func TestCutAfterTextIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Cut(messageStart(), blockStart(0, obj{"type": "text", "text": ""}), textDelta(0, "Half")))
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	ce := agenttest.RunError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, rec, "hi"), "the run"))
	require.Equal(t, agent.CodeStreamCut, ce.Code)
	require.Equal(t, []string{"text: Half"}, rec.Log())
	require.Len(t, srv.Requests(), 1)
}

// 401 is not retried, and the user sees what to fix, not the SDK's text.
func TestUnauthorizedIsNotRetried(t *testing.T) {
	t.Parallel()
	body := apiError("authentication_error", "invalid x-api-key")
	t.Run("model", func(t *testing.T) {
		t.Parallel()
		srv := agenttest.NewServer(t, agenttest.Status(401, body))
		_, err := agenttest.Collect(t, newModel(t, srv), hi())
		me := agenttest.ExpectModelError(t, err, agent.CodeModelAuth, false)
		require.NotContains(t, me.Message, "POST")
		require.NotContains(t, me.Message, srv.URL)
		require.NotContains(t, me.Message, "/v1/messages")
		require.Len(t, srv.Requests(), 1)
	})
	t.Run("loop", func(t *testing.T) {
		t.Parallel()
		srv := agenttest.NewServer(t, agenttest.Status(401, body))
		l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
		ce := agenttest.RunError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run"))
		require.Equal(t, agent.CodeModelAuth, ce.Code)
		require.Equal(t, "the model provider refused the credentials: check the API key: invalid x-api-key", ce.Message)
		require.NotContains(t, ce.Message, "POST")
		require.NotContains(t, ce.Message, srv.URL)
		require.Len(t, srv.Requests(), 1)
	})
}

// A 400 is not retried either.
func TestBadRequestIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, agenttest.Status(400, apiError("invalid_request_error", "messages.0.content: Field required")))
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	ce := agenttest.RunError(t, agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run"))
	require.Equal(t, agent.CodeModelRejected, ce.Code)
	require.Equal(t, "the model provider rejected the request (HTTP 400): messages.0.content: Field required", ce.Message)
	require.Len(t, srv.Requests(), 1)
}

// --- Continuing a cut-off answer ---------------------------------------------------------

// cutOff is a request to continue "what is it?"'s answer, cut off after text.
func cutOff(text string) agent.ModelRequest {
	return agent.ModelRequest{Continue: text, Messages: []agent.Message{
		{Role: agent.RoleUser, Text: "what is it?"},
		{Role: agent.RoleAssistant, Text: text, Reasoning: []agent.Reasoning{{Text: "unsigned"}}},
	}}
}

// A cut-off answer is continued with a prefill: the request ends with an assistant
// message of the text so far, without the trailing white space the API refuses; the
// answer's opening white space that repeats it is dropped, since the user has it
// already, and the rest streams as it comes.
func TestContinueIsAPrefill(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cont, prefill string
		deltas        []string
		want          []agent.ModelEvent
	}{
		{"The answer is fo", "The answer is fo", []string{"rty-", "two."}, []agent.ModelEvent{text("rty-"), text("two.")}},
		{"The answer is ", "The answer is", []string{" forty-two."}, []agent.ModelEvent{text("forty-two.")}},
		{"The answer is ", "The answer is", []string{"forty-two."}, []agent.ModelEvent{text("forty-two.")}},
		{"Done.\n\n", "Done.", []string{"\n", "\nNext."}, []agent.ModelEvent{text("Next.")}},
		{"Done.\n\n", "Done.", []string{" Next."}, []agent.ModelEvent{text(" Next.")}},
	} {
		srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, c.deltas...)))
		evs, err := agenttest.Collect(t, newModel(t, srv), cutOff(c.cont))
		require.NoError(t, err)
		require.Equal(t, append(c.want, usage()), evs, "%q then %q", c.cont, c.deltas)
		require.JSONEq(t, `[
			{"role":"user","content":[{"type":"text","text":"what is it?"}]},
			{"role":"assistant","content":[{"type":"text","text":`+jsonString(c.prefill)+`}]}
		]`, field(t, srv.Body(0), "messages"), "%q", c.cont)
	}
}

// Cut off after white space alone: nothing is prefilled (the API refuses an empty text
// block as it refuses white space), and the answer does not repeat that white space.
func TestContinueAfterWhiteSpaceAlone(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, "\nIt is 42.")))
	evs, err := agenttest.Collect(t, newModel(t, srv), cutOff("\n"))
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{text("It is 42."), usage()}, evs)
	require.JSONEq(t, `[{"role":"user","content":[{"type":"text","text":"what is it?"}]}]`, field(t, srv.Body(0), "messages"))
}

// Extended thinking allows no prefill: the cut-off message goes as it is, with its
// signed thinking, and a user message asks the model to continue it.
func TestContinueWithThinkingAsksToGoOn(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", thinkingBlock(0, "sig2", "Go on."), textBlock(1, " forty-two.")))
	m, err := anthropic.New(anthropic.Config{BaseURL: srv.URL, APIKey: "test-key", Model: "claude-test", MaxTokens: 16000, ThinkingBudget: 2048})
	require.NoError(t, err)
	req := cutOff("The answer is ")
	req.Messages[1].Reasoning = []agent.Reasoning{{Text: "Think.", Signature: "sig1"}}
	evs, err := agenttest.Collect(t, m, req)
	require.NoError(t, err)
	require.Equal(t, []agent.ModelEvent{
		thought("Go on."), {Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Signature: "sig2"}},
		text("forty-two."), usage(),
	}, evs)
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"what is it?"}]},
		{"role":"assistant","content":[
			{"type":"thinking","thinking":"Think.","signature":"sig1"},
			{"type":"text","text":"The answer is "}
		]},
		{"role":"user","content":[{"type":"text","text":`+jsonString(agent.ContinueInstruction)+`}]}
	]`, field(t, srv.Body(0), "messages"))
}

// A run continued from a checkpoint that ends in cut-off text: the request prefills it,
// and only the rest streams.
func TestContinuedRunThroughTheLoop(t *testing.T) {
	t.Parallel()
	srv := agenttest.NewServer(t, answer("end_turn", textBlock(0, " and ", "sunny.")))
	l, _ := agenttest.NewLoop(t, newModel(t, srv), agenttest.Weather{})
	rec := &agenttest.Recorder{}
	out := "15°C, sunny in Paris"
	checkpoint := []chat.Message{
		{Role: chat.RoleTool, Kind: chat.KindText, Status: chat.MessageComplete, Tool: &chat.ToolCall{
			CallID: "toolu_W", Name: "get_weather", Input: json.RawMessage(`{"location":"Paris"}`), Output: &out, Status: chat.ToolOK}},
		{Role: chat.RoleAssistant, Kind: chat.KindText, Content: "It is 15°C ", Status: chat.MessageStreaming},
	}
	done := make(chan error, 1)
	go func() {
		done <- l.Run(t.Context(), conversation.Request{Content: "Paris?", Checkpoint: checkpoint}, rec)
	}()
	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Equal(t, []string{"text: and ", "text: sunny.", usageLine}, rec.Log())
	require.JSONEq(t, `[
		{"role":"user","content":[{"type":"text","text":"Paris?"}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"toolu_W","name":"get_weather","input":{"location":"Paris"}}
		]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"toolu_W","content":[{"type":"text","text":"15°C, sunny in Paris"}],"is_error":false}
		]},
		{"role":"assistant","content":[{"type":"text","text":"It is 15°C"}]}
	]`, field(t, srv.Body(0), "messages"))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
