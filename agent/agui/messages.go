package agui

import (
	"bytes"
	"encoding/json"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// The wire types of AG-UI's RunAgentInput (sdks/typescript/packages/core, types).

type runAgentInput struct {
	ThreadID        string          `json:"threadId"`
	RunID           string          `json:"runId"`
	ProtocolVersion string          `json:"protocolVersion"`
	State           json.RawMessage `json:"state"`
	Messages        []message       `json:"messages"`
	Tools           []struct{}      `json:"tools"`
	Context         []struct{}      `json:"context"`
	ForwardedProps  struct{}        `json:"forwardedProps"`
	Resume          []resumeEntry   `json:"resume,omitempty"`
}

type message struct {
	ID         string     `json:"id"`
	Role       string     `json:"role"`
	Content    *string    `json:"content,omitempty"`
	ToolCalls  []toolCall `json:"toolCalls,omitempty"`
	ToolCallID string     `json:"toolCallId,omitempty"`
	Error      string     `json:"error,omitempty"`
}

type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type resumeEntry struct {
	InterruptID string `json:"interruptId"`
	Status      string `json:"status"`
	Payload     any    `json:"payload,omitempty"`
}

// unfinished is what the agent is told of a call that never ended (cancelled, or left
// running or waiting by a run that ended).
const unfinished = "The tool call did not finish: its run was stopped."

// interrupted is what the agent is told of a call that was running when chatd's process
// died: chatd cannot know whether it took effect.
const interrupted = "The tool call was interrupted: it was running when the server stopped, and whether it took effect is unknown."

func ptr(s string) *string { return &s }

// toMessages maps stored chat messages (the active path, or a run's checkpoint) to
// AG-UI messages: user and system messages as they are; assistant text as assistant
// messages, each with the tool calls of the tool messages that follow it as toolCalls
// (consecutive text segments are one message); each tool message as a tool message whose
// content is the call's output. Reasoning is not sent: AG-UI agents keep their own.
func toMessages(msgs []chat.Message) []message {
	var out []message
	cur := -1 // the assistant message that tool calls attach to, -1 for none
	for _, m := range msgs {
		switch {
		case m.Role == chat.RoleUser:
			out, cur = append(out, message{ID: m.ID.String(), Role: "user", Content: ptr(m.Content)}), -1
		case m.Role == chat.RoleSystem:
			out, cur = append(out, message{ID: m.ID.String(), Role: "system", Content: ptr(m.Content)}), -1
		case m.Role == chat.RoleAssistant && m.Kind == chat.KindReasoning:
		case m.Role == chat.RoleAssistant:
			if m.Content == "" {
				continue
			}
			if cur >= 0 && cur == len(out)-1 && len(out[cur].ToolCalls) == 0 {
				*out[cur].Content += m.Content // segments of one answer
				continue
			}
			out = append(out, message{ID: m.ID.String(), Role: "assistant", Content: ptr(m.Content)})
			cur = len(out) - 1
		case m.Role == chat.RoleTool && m.Tool != nil:
			if cur < 0 {
				out = append(out, message{ID: "calls-" + m.ID.String(), Role: "assistant"})
				cur = len(out) - 1
			}
			args := string(m.Tool.Input)
			if args == "" {
				args = "{}"
			}
			out[cur].ToolCalls = append(out[cur].ToolCalls, toolCall{ID: m.Tool.CallID, Type: "function", Function: functionCall{Name: m.Tool.Name, Arguments: args}})
			if m.Tool.Status == chat.ToolAwaitingApproval {
				continue // resumed: the agent gives its result
			}
			content, errText := toolContent(m)
			out = append(out, message{ID: m.ID.String(), Role: "tool", ToolCallID: m.Tool.CallID, Content: ptr(content), Error: errText})
		}
	}
	return out
}

// toolContent is what the agent is told of a stored call: its output, and an error for
// a call that failed or never finished. A denied call was one the agent asked chatd to
// handle (an approval): it gets the denial as approvalContent writes it.
func toolContent(m chat.Message) (content, errText string) {
	out := ""
	if m.Tool.Output != nil {
		out = *m.Tool.Output
	}
	switch m.Tool.Status {
	case chat.ToolOK:
		return out, ""
	case chat.ToolDenied:
		if out == "" {
			out = conversation.DeclinedOutput
		}
		return approvalContent(conversation.Decision{Output: out}), ""
	case chat.ToolError:
		if m.Error != nil && m.Error.Message != "" {
			return out, m.Error.Message
		}
		return out, "the tool call failed"
	case chat.ToolInterrupted:
		return interrupted, interrupted
	}
	return unfinished, unfinished
}

// approvalContent is the tool message chatd answers a call the agent left to it with:
// {"approved":true}, or {"approved":false,"reason":"…"} with what the model is told of
// the denial (conversation.DeclinedOutput, or ExpiredOutput).
func approvalContent(d conversation.Decision) string {
	v := struct {
		Approved bool   `json:"approved"`
		Reason   string `json:"reason,omitempty"`
	}{Approved: d.Approved}
	if !d.Approved {
		v.Reason = d.Output
		if v.Reason == "" {
			v.Reason = conversation.DeclinedOutput
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// stateKey marks a stored state that is chatd's wrapper, not the agent's own state: the
// agent's state with the interrupts of the calls that wait for a decision.
const stateKey = "chatd.agui"

type wrappedState struct {
	Version    int               `json:"chatd.agui"`
	State      json.RawMessage   `json:"state,omitempty"`
	Interrupts map[string]string `json:"interrupts"`
}

// wrapState is what is stored of the run's state: the agent's own, or, while calls with
// interrupts wait for a decision, a wrapper that keeps them too.
func wrapState(state json.RawMessage, interrupts map[string]string) json.RawMessage {
	if len(interrupts) == 0 {
		return state
	}
	b, _ := json.Marshal(wrappedState{Version: 1, State: state, Interrupts: interrupts})
	return b
}

// unwrapState reads what wrapState stored: the agent's state and the interrupts.
func unwrapState(stored json.RawMessage) (json.RawMessage, map[string]string) {
	if !bytes.Contains(stored, []byte(stateKey)) {
		return stored, nil
	}
	var w wrappedState
	if json.Unmarshal(stored, &w) != nil || w.Version != 1 {
		return stored, nil
	}
	if string(w.State) == "null" {
		w.State = nil
	}
	return w.State, w.Interrupts
}
