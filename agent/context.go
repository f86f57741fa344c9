package agent

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// Transcript turns a session's stored messages into the model's view of the
// conversation. Each step of an earlier run was stored as reasoning, text, then its tool
// calls, segment by segment; it becomes one assistant message followed by one tool
// message per call, each call paired with its result. Partial and cancelled text is kept
// as it was; a text segment that follows another of the same step is the continuation
// of one cut off (a continued run streams it as a new segment), so the two are joined
// as they are. Calls that never finished get an error result, so every call has one;
// an interrupted call's says it was cut off and its effects are unknown
// (InterruptedResult).
func Transcript(history []chat.Message) []Message {
	var out []Message
	var cur *Message // the assistant message of the current step
	var results []Message
	flush := func() {
		if cur != nil && (cur.Text != "" || len(cur.ToolCalls) > 0 || len(cur.Reasoning) > 0) {
			out = append(out, *cur)
			out = append(out, results...)
		}
		cur, results = nil, nil
	}
	step := func() *Message {
		if cur == nil {
			cur = &Message{Role: RoleAssistant}
		}
		return cur
	}
	for _, m := range history {
		switch {
		case m.Role == chat.RoleUser:
			flush()
			out = append(out, Message{Role: RoleUser, Text: m.Content})
		case m.Role == chat.RoleAssistant && m.Kind == chat.KindReasoning:
			if cur != nil && (cur.Text != "" || len(cur.ToolCalls) > 0) {
				flush() // reasoning opens a new step
			}
			step().Reasoning = append(step().Reasoning, reasoningBlock(m))
		case m.Role == chat.RoleAssistant:
			if m.Content == "" {
				continue
			}
			if cur != nil && len(cur.ToolCalls) > 0 {
				flush() // text after tool calls is the next step
			}
			step().Text += m.Content
		case m.Role == chat.RoleTool && m.Tool != nil:
			s := step()
			s.ToolCalls = append(s.ToolCalls, ToolCall{ID: m.Tool.CallID, Name: m.Tool.Name, Input: canonicalJSON(m.Tool.Input)})
			results = append(results, toolResult(m))
		}
	}
	flush()
	return out
}

func reasoningBlock(m chat.Message) Reasoning {
	r := Reasoning{Text: m.Content}
	var data struct {
		Signature string `json:"signature"`
		Redacted  string `json:"redacted"`
	}
	if len(m.ProviderData) > 0 && json.Unmarshal(m.ProviderData, &data) == nil {
		r.Signature, r.Redacted = data.Signature, data.Redacted
	}
	return r
}

func toolResult(m chat.Message) Message {
	res := Message{Role: RoleTool, ToolCallID: m.Tool.CallID, ToolName: m.Tool.Name}
	out := ""
	if m.Tool.Output != nil {
		out = *m.Tool.Output
	}
	switch m.Tool.Status {
	case chat.ToolOK:
		res.Result = out
	case chat.ToolDenied:
		res.Result, res.IsError = conversation.DeclinedOutput, true
	case chat.ToolError:
		res.Result, res.IsError = out, true
		if m.Error != nil && m.Error.Message != "" && !strings.Contains(out, m.Error.Message) {
			res.Result = strings.TrimSpace(out + "\n[error: " + m.Error.Message + "]")
		}
	case chat.ToolInterrupted:
		if m.Error != nil && out == m.Error.Message {
			out = "" // the actor's note for the user, not output of the tool
		}
		res.Result, res.IsError = interruptedResult(out), true
	default: // cancelled, or left running by a run that ended
		res.Result, res.IsError = "The tool call did not finish: its run was stopped.", true
	}
	return res
}

// InterruptedResult is what the model is told of a tool call that was running when the
// server stopped (tool status interrupted): it did not finish, it was not run again,
// and it may or may not have done what it was asked to. Output it streamed before is
// added after it.
const InterruptedResult = "The tool call was cut off: the server stopped while it was running. " +
	"It did not finish and was not run again; whether it had any effect is unknown."

// interruptedResult is InterruptedResult with the output the call streamed before.
func interruptedResult(output string) string {
	if strings.TrimSpace(output) == "" {
		return InterruptedResult
	}
	return InterruptedResult + "\nIts output until then:\n" + output
}

// reasoningData is what EndReasoning keeps for a block.
func reasoningData(r Reasoning) json.RawMessage {
	if r.Signature == "" && r.Redacted == "" {
		return nil
	}
	b, _ := json.Marshal(struct {
		Signature string `json:"signature,omitempty"`
		Redacted  string `json:"redacted,omitempty"`
	}{r.Signature, r.Redacted})
	return b
}

// EstimateTokens guesses how many tokens messages take: about four characters a token,
// plus a little per message and call. It only has to be good enough to stay under a
// budget; the model's own count comes back in usage.
func EstimateTokens(msgs []Message) int {
	chars := 0
	for _, m := range msgs {
		chars += 16 + len(m.Text) + len(m.Result)
		for _, r := range m.Reasoning {
			chars += len(r.Text) + len(r.Signature)/4
		}
		for _, c := range m.ToolCalls {
			chars += 16 + len(c.Name) + len(c.Input)
		}
	}
	return chars / 4
}

// DefaultOutputReserve is how many tokens of the budget MessageBudget keeps for the
// answer when its cap is not known: this many, or a quarter of the budget when that is
// less.
const DefaultOutputReserve = 4096

// MessageBudget is what is left of contextTokens for the conversation once the rest of
// what the model's context holds is counted: the system prompt and the tool specs
// (estimated as EstimateTokens does) and the answer, answerTokens long (its cap; 0 when
// unknown, which keeps DefaultOutputReserve). It is at least 1, so that Trim still
// sends the newest turn when nothing is left; a contextTokens <= 0 (no budget) is
// returned as it is.
func MessageBudget(contextTokens int, system string, tools []ToolSpec, answerTokens int) int {
	if contextTokens <= 0 {
		return contextTokens
	}
	if answerTokens <= 0 {
		answerTokens = min(DefaultOutputReserve, contextTokens/4)
	}
	chars := len(system)
	for _, t := range tools {
		chars += 16 + len(t.Name) + len(t.Description) + len(t.InputSchema)
	}
	return max(1, contextTokens-chars/4-answerTokens)
}

// Trim drops the oldest turns (a user message and everything up to the next) until the
// messages fit budget tokens. The last turn, the one being answered, always stays; a turn
// is dropped whole, so a tool call is never separated from its result. Whatever comes
// before the first user message (a history that starts mid-turn) is dropped too: models
// expect the conversation to open with the user. budget <= 0 keeps every turn.
func Trim(msgs []Message, budget int) []Message {
	var starts []int // where each turn begins
	for i, m := range msgs {
		if m.Role == RoleUser {
			starts = append(starts, i)
		}
	}
	if len(starts) == 0 {
		return msgs
	}
	msgs = msgs[starts[0]:]
	for i := range starts {
		starts[i] -= starts[0]
	}
	if budget <= 0 {
		return msgs
	}
	for _, s := range starts { // the oldest turn that can start the conversation and fit
		if EstimateTokens(msgs[s:]) <= budget {
			return msgs[s:]
		}
	}
	return msgs[starts[len(starts)-1]:]
}

// canonicalJSON returns input compact, with object keys sorted and numbers as written:
// the same bytes for a call's input whether the history comes from the actor's memory
// (as the model wrote it) or from the database (as PostgreSQL's jsonb prints it), so a
// model's prompt, and a provider's prompt cache, do not change with where it was read.
// (Except a number jsonb rewrites: 1e2 as written, 100 from jsonb.) Input that does not
// parse is returned as it is.
func canonicalJSON(input json.RawMessage) json.RawMessage {
	if len(input) == 0 {
		return input
	}
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return input
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the model reads "<", not "\u003c"
	if enc.Encode(v) != nil {
		return input
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}
