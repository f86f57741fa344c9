package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

func user(text string) chat.Message {
	return chat.Message{Role: chat.RoleUser, Kind: chat.KindText, Content: text, Status: chat.MessageComplete}
}

func said(text string, status chat.MessageStatus) chat.Message {
	return chat.Message{Role: chat.RoleAssistant, Kind: chat.KindText, Content: text, Status: status}
}

func thought(text, providerData string) chat.Message {
	m := chat.Message{Role: chat.RoleAssistant, Kind: chat.KindReasoning, Content: text, Status: chat.MessageComplete}
	if providerData != "" {
		m.ProviderData = json.RawMessage(providerData)
	}
	return m
}

func called(id, name, input, output string, status chat.ToolStatus) chat.Message {
	m := chat.Message{Role: chat.RoleTool, Kind: chat.KindText, Status: chat.MessageComplete,
		Tool: &chat.ToolCall{CallID: id, Name: name, Input: json.RawMessage(input), Status: status}}
	if output != "" {
		m.Tool.Output = &output
	}
	return m
}

// Each stored step (reasoning, text, then its calls) becomes an assistant message followed
// by the calls' results, each result with its call.
func TestTranscriptPairsCallsWithResults(t *testing.T) {
	history := []chat.Message{
		user("list files"),
		thought("I should look", `{"signature":"s1"}`),
		said("Let me look.", chat.MessageComplete),
		called("a", "shell", `{"command":"ls"}`, "x.txt", chat.ToolOK),
		called("b", "shell", `{"command":"pwd"}`, "/w", chat.ToolOK),
		said("There is x.txt.", chat.MessageComplete),
		user("delete it"),
		called("c", "shell", `{"command":"rm x.txt"}`, "", chat.ToolDenied),
		said("OK, I won't.", chat.MessageComplete),
	}
	got := agent.Transcript(history)
	want := []agent.Message{
		{Role: agent.RoleUser, Text: "list files"},
		{Role: agent.RoleAssistant, Text: "Let me look.", Reasoning: []agent.Reasoning{{Text: "I should look", Signature: "s1"}},
			ToolCalls: []agent.ToolCall{{ID: "a", Name: "shell", Input: json.RawMessage(`{"command":"ls"}`)}, {ID: "b", Name: "shell", Input: json.RawMessage(`{"command":"pwd"}`)}}},
		{Role: agent.RoleTool, ToolCallID: "a", ToolName: "shell", Result: "x.txt"},
		{Role: agent.RoleTool, ToolCallID: "b", ToolName: "shell", Result: "/w"},
		{Role: agent.RoleAssistant, Text: "There is x.txt."},
		{Role: agent.RoleUser, Text: "delete it"},
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{{ID: "c", Name: "shell", Input: json.RawMessage(`{"command":"rm x.txt"}`)}}},
		{Role: agent.RoleTool, ToolCallID: "c", ToolName: "shell", Result: conversation.DeclinedOutput, IsError: true},
		{Role: agent.RoleAssistant, Text: "OK, I won't."},
	}
	require.Equal(t, want, got)
}

// Partial and cancelled text stays as it was; calls that never finished get an error
// result; empty segments (interrupted before their text was stored) and redacted
// reasoning are kept sensibly.
func TestTranscriptKeepsPartialsAndEndsUnfinishedCalls(t *testing.T) {
	failed := called("e", "t", `{}`, "partial", chat.ToolError)
	failed.Error = &chat.ErrorInfo{Code: "tool_error", Message: "boom"}
	history := []chat.Message{
		user("go"),
		said("half an ans", chat.MessageCancelled),
		user("again"),
		thought("", `{"redacted":"opaque"}`),
		called("r", "t", `{}`, "", chat.ToolCancelled),
		failed,
		said("", chat.MessageInterrupted),
	}
	got := agent.Transcript(history)
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "go"},
		{Role: agent.RoleAssistant, Text: "half an ans"},
		{Role: agent.RoleUser, Text: "again"},
		{Role: agent.RoleAssistant, Reasoning: []agent.Reasoning{{Redacted: "opaque"}},
			ToolCalls: []agent.ToolCall{{ID: "r", Name: "t", Input: json.RawMessage(`{}`)}, {ID: "e", Name: "t", Input: json.RawMessage(`{}`)}}},
		{Role: agent.RoleTool, ToolCallID: "r", ToolName: "t", Result: "The tool call did not finish: its run was stopped.", IsError: true},
		{Role: agent.RoleTool, ToolCallID: "e", ToolName: "t", Result: "partial\n[error: boom]", IsError: true},
	}, got)
}

func TestTrimDropsOldestWholeTurns(t *testing.T) {
	long := strings.Repeat("x", 400) // about 100 tokens
	msgs := []agent.Message{
		{Role: agent.RoleUser, Text: long},
		{Role: agent.RoleAssistant, Text: long, ToolCalls: []agent.ToolCall{{ID: "a", Name: "t", Input: json.RawMessage(`{}`)}}},
		{Role: agent.RoleTool, ToolCallID: "a", ToolName: "t", Result: long},
		{Role: agent.RoleUser, Text: long},
		{Role: agent.RoleAssistant, Text: long},
		{Role: agent.RoleUser, Text: "now"},
	}
	require.Equal(t, msgs, agent.Trim(msgs, 0), "no budget: everything")
	require.Equal(t, msgs, agent.Trim(msgs, 10000))

	// Room for the last two turns: the first turn goes whole, call and result together.
	got := agent.Trim(msgs, agent.EstimateTokens(msgs[3:]))
	require.Equal(t, msgs[3:], got)
	got = agent.Trim(msgs, agent.EstimateTokens(msgs[3:])-1)
	require.Equal(t, msgs[5:], got)
	// The current turn stays even over budget.
	require.Equal(t, msgs[5:], agent.Trim(msgs, 1))

	// A history cut mid-turn starts at its first user message.
	require.Equal(t, msgs[3:], agent.Trim(msgs[1:], 0))
}

// The budget left for the conversation is the context less the system prompt, the tool
// specs (four characters a token, like the messages) and the answer's tokens.
func TestMessageBudget(t *testing.T) {
	t.Parallel()
	system := strings.Repeat("s", 4000) // 1000 tokens
	// 16 + 11 + 571 + 2 = 600 characters: 150 tokens
	tools := []agent.ToolSpec{{Name: "get_weather", Description: strings.Repeat("d", 571), InputSchema: json.RawMessage(`{}`)}}

	require.Equal(t, 10000-1000-500, agent.MessageBudget(10000, system, nil, 500))
	require.Equal(t, 10000-1150-500, agent.MessageBudget(10000, system, tools, 500))
	// Without a known cap the answer gets DefaultOutputReserve, or a quarter of a small budget.
	require.Equal(t, 100000-agent.DefaultOutputReserve, agent.MessageBudget(100000, "", nil, 0))
	require.Equal(t, 8000-2000, agent.MessageBudget(8000, "", nil, 0))
	// Nothing left: 1, so Trim keeps the newest turn and no more.
	require.Equal(t, 1, agent.MessageBudget(2000, system, tools, 1000))
	// No budget stays no budget.
	require.Equal(t, 0, agent.MessageBudget(0, system, tools, 1000))

	msgs := []agent.Message{
		{Role: agent.RoleUser, Text: "first"}, {Role: agent.RoleAssistant, Text: "answer"},
		{Role: agent.RoleUser, Text: "now"},
	}
	require.Equal(t, msgs[2:], agent.Trim(msgs, agent.MessageBudget(2000, system, tools, 1000)))
}

// The loop keeps the system prompt and the answer's cap out of the conversation's
// budget: an exchange that fits ContextTokens alone is left out when they are counted.
func TestSystemPromptAndAnswerCountAgainstTheBudget(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Say("First answer."), modeltest.Say("Second answer."))
	h := newHarness(t, model, func(c *agent.Config) {
		c.ContextTokens = 1000
		c.System = strings.Repeat("Be brief. ", 160) // 400 tokens
		c.MaxOutputTokens = 500
	})
	h.send(strings.Repeat("a long first question ", 20)) // about 110 tokens
	require.Equal(t, "chat.done", h.end().Type)
	h.send("second question")
	require.Equal(t, "chat.done", h.end().Type)

	reqs := model.Requests()
	require.Len(t, reqs, 2)
	// 1000 - 400 - 500 leaves 100 tokens: the first exchange no longer fits.
	require.Equal(t, []agent.Message{{Role: agent.RoleUser, Text: "second question"}}, reqs[1].Messages)
}

// The second run of a session sends the model the first run's exchange.
func TestSecondRunSeesTheFirst(t *testing.T) {
	t.Parallel()
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) { return "echoed", nil })
	model := modeltest.New(
		modeltest.Turn{Events: modeltest.Events(
			[]agent.ModelEvent{{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: "hmm"}}, {Kind: agent.EventReasoningEnd, Reasoning: agent.Reasoning{Signature: "sig"}}},
			modeltest.Text("Calling."),
			[]agent.ModelEvent{modeltest.Call("e1", "echo", `{"x":1}`)},
		)},
		modeltest.Say("First answer."),
		modeltest.Say("Second answer."),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("first question")
	require.Equal(t, "chat.done", h.end().Type)
	h.send("second question")
	require.Equal(t, "chat.done", h.end().Type)

	reqs := model.Requests()
	require.Len(t, reqs, 3)
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "first question"},
		{Role: agent.RoleAssistant, Text: "Calling.", Reasoning: []agent.Reasoning{{Text: "hmm", Signature: "sig"}},
			ToolCalls: []agent.ToolCall{{ID: "e1", Name: "echo", Input: json.RawMessage(`{"x":1}`)}}},
		{Role: agent.RoleTool, ToolCallID: "e1", ToolName: "echo", Result: "echoed"},
		{Role: agent.RoleAssistant, Text: "First answer."},
		{Role: agent.RoleUser, Text: "second question"},
	}, reqs[2].Messages)

	msgs := h.stored()
	require.Equal(t, "reasoning", msgs[1].Kind)
	require.Equal(t, "hmm", msgs[1].Content)
}

// A continued run's text: the segment that was cut off and the one that continues it
// are one text, joined as they are. An interrupted call tells the model it was cut off
// and its effects are unknown, with the output it streamed (not the actor's note for
// the user, which is not output).
func TestTranscriptOfAContinuedRun(t *testing.T) {
	t.Parallel()
	note := "the call was running when the server stopped; whether it had any effect is unknown"
	cut := called("i1", "shell", `{}`, "line 1\n", chat.ToolInterrupted)
	cut.Error = &chat.ErrorInfo{Code: "interrupted", Message: note}
	silent := called("i2", "shell", `{}`, note, chat.ToolInterrupted)
	silent.Error = &chat.ErrorInfo{Code: "interrupted", Message: note}
	got := agent.Transcript([]chat.Message{
		user("go"),
		said("Running it ", chat.MessageInterrupted),
		said("now.", chat.MessageComplete),
		cut,
		silent,
		said("Hello wor", chat.MessageInterrupted),
		said("ld", chat.MessageInterrupted),
		said("!", chat.MessageComplete),
	})
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "go"},
		{Role: agent.RoleAssistant, Text: "Running it now.", ToolCalls: []agent.ToolCall{
			{ID: "i1", Name: "shell", Input: json.RawMessage(`{}`)}, {ID: "i2", Name: "shell", Input: json.RawMessage(`{}`)},
		}},
		{Role: agent.RoleTool, ToolCallID: "i1", ToolName: "shell", Result: agent.InterruptedResult + "\nIts output until then:\nline 1\n", IsError: true},
		{Role: agent.RoleTool, ToolCallID: "i2", ToolName: "shell", Result: agent.InterruptedResult, IsError: true},
		{Role: agent.RoleAssistant, Text: "Hello world!"},
	}, got)
}

// A call's input reaches the model as the same bytes whether the history came from the
// actor's memory (as the model wrote it) or from the database (as jsonb prints it), so a
// provider's prompt cache sees the same prefix.
func TestTranscriptInputIsTheSameFromMemoryAndFromTheDatabase(t *testing.T) {
	call := func(input string) []chat.Message {
		return []chat.Message{
			{Role: chat.RoleUser, Content: "go"},
			{Role: chat.RoleTool, Status: chat.MessageComplete, Tool: &chat.ToolCall{CallID: "c1", Name: "t", Input: json.RawMessage(input)}},
		}
	}
	asWritten := agent.Transcript(call(`{"query":"<b> & c","n":1.50,"list":[1,2,{"z":true,"a":null}]}`))
	asJSONB := agent.Transcript(call(`{"n": 1.50, "list": [1, 2, {"a": null, "z": true}], "query": "<b> & c"}`))
	require.Equal(t, asWritten, asJSONB)
	require.JSONEq(t, `{"query":"<b> & c","n":1.50,"list":[1,2,{"z":true,"a":null}]}`, string(asWritten[1].ToolCalls[0].Input))
	require.Contains(t, string(asWritten[1].ToolCalls[0].Input), "<b> & c", "not escaped for HTML")
}
