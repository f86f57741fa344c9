package ws_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

func decideWith(c *wstest.Client, requestID, callID, decision string, extra map[string]any) wstest.Frame {
	f := map[string]any{"type": "tool.decide", "requestId": requestID, "toolCallId": callID, "decision": decision}
	for k, v := range extra {
		f[k] = v
	}
	c.SendUnchecked(f) // bad values are part of the test
	return c.ReadReply(requestID)
}

// A decision names the input it was shown by its hash: another input's hash is refused
// with conflict and the call waits on; the right one decides it, recorded as made
// through this transport.
func TestApprovalInputHashMustMatch(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	input := `{"command": "rm -rf build", "cwd": "/work"}`
	e := newEnv(t, envOptions{agent: script.New(script.Approval("c1", "shell", input, "removed", decided))})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Equal(t, "ack", a.Chat("r1", "clean").Type)

	want := chat.InputHash(json.RawMessage(input))
	start := a.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" })
	require.Equal(t, want, start.Message.Tool.InputHash)
	st := awaitStatus(a, "awaiting_approval")
	require.Equal(t, want, st.Run.PendingApproval.InputHash)
	awaitStatus(b, "awaiting_approval")

	other := chat.InputHash(json.RawMessage(`{"command": "ls"}`))
	refused := decideWith(a, "d1", "c1", "approve", map[string]any{"inputHash": other})
	require.Equal(t, "conflict", refused.Code, "%s", refused.Raw)
	require.Equal(t, "bad_request", decideWith(a, "d2", "c1", "approve", map[string]any{"inputHash": "ABC"}).Code)
	require.Equal(t, "bad_request", decideWith(a, "d3", "c1", "deny", map[string]any{"scope": "session"}).Code)
	require.Equal(t, "bad_request", decideWith(a, "d4", "c1", "approve", map[string]any{"scope": "forever"}).Code)
	// Nothing changed: the call still waits, for every tab and in the database.
	require.Equal(t, "awaiting_approval", string(storedRun(t, e, a.State.SessionID, "r1").Status))
	later := e.join(a.State.SessionID)
	require.Equal(t, "awaiting_approval", later.State.ActiveRun.Status)
	require.Equal(t, want, later.State.ActiveRun.PendingApproval.InputHash)
	require.Len(t, decided, 0)

	ack := decideWith(b, "d5", "c1", "approve", map[string]any{"inputHash": want})
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.True(t, (<-decided).Approved)
	update := a.Await(func(f wstest.Frame) bool { return f.Type == "tool.update" })
	require.NotNil(t, update.Message.Tool.Decision)
	require.True(t, update.Message.Tool.Decision.Approved)
	require.Equal(t, "ws", update.Message.Tool.Decision.Via)
	require.Empty(t, update.Message.Tool.InputHash, "only a waiting call carries the hash")
	require.Equal(t, "chat.done", a.ReadTerminal().Type)

	msgs := e.dbMessages(a.State.SessionID)
	require.Equal(t, "ok", msgs[1].Tool.Status)
	require.Equal(t, "ws", msgs[1].Tool.Decision.Via)
	require.False(t, msgs[1].Tool.Decision.At.IsZero())
	b.ReadToSeq(a.State.LastSeq)
	e.requireConverged(a.State.SessionID, a, b)
}

// "Allow for this conversation": an approval with scope session makes a rule; a later
// matching call runs without asking, recorded as approved by the rule; a different one
// still asks; any tab can revoke the rule, after which matching calls ask again.
func TestApprovalScopeSessionRule(t *testing.T) {
	t.Parallel()
	d1, d2, d3, d4, d5 := make(chan conversation.Decision, 1), make(chan conversation.Decision, 1), make(chan conversation.Decision, 1), make(chan conversation.Decision, 1), make(chan conversation.Decision, 1)
	e := newEnv(t, envOptions{agent: script.New(
		script.Approval("c1", "shell", `{"command": "ls -l"}`, "a", d1),
		script.Approval("c2", "shell", `{"command": "ls /tmp"}`, "b", d2),
		script.Approval("c3", "shell", `{"command": "rm x"}`, "c", d3),
		script.Approval("c4", "shell", `{"command": "ls; rm -rf ~"}`, "d", d4),
		script.Approval("c5", "shell", `{"command": "ls again"}`, "e", d5),
	)})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Empty(t, a.State.ApprovalRules)
	require.Equal(t, "ack", a.Chat("r1", "look around").Type)
	awaitStatus(a, "awaiting_approval")

	ack := decideWith(a, "d1", "c1", "approve", map[string]any{"scope": "session"})
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.True(t, (<-d1).Approved)
	rules := b.Await(func(f wstest.Frame) bool { return f.Type == "approval.rules" })
	require.Len(t, rules.Rules, 1)
	rule := rules.Rules[0]
	require.Equal(t, "shell", rule.Tool)
	require.Equal(t, "ls", *rule.Command)
	require.Equal(t, "c1", rule.ToolCallID)
	require.Equal(t, "ws", rule.CreatedVia)

	// c2 matches: it runs without asking, approved by the rule.
	require.True(t, (<-d2).Approved)
	start := b.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" && f.Message.Tool.CallID == "c2" })
	require.Equal(t, "running", start.Message.Tool.Status)
	require.Equal(t, "rule", start.Message.Tool.Decision.Via)
	require.Equal(t, rule.RuleID, start.Message.Tool.Decision.RuleID)

	// c3 is another command: it asks.
	st := awaitStatus(b, "awaiting_approval")
	require.Equal(t, "c3", st.Run.PendingApproval.ToolCallID)
	later := e.join(a.State.SessionID)
	require.Len(t, later.State.ApprovalRules, 1, "the snapshot lists the rules")
	require.Equal(t, rule.RuleID, later.State.ApprovalRules[0].RuleID)
	require.Equal(t, "ack", decide(b, "d3", "c3", "approve").Type)
	require.True(t, (<-d3).Approved)

	// c4 starts with ls but chains another command: it asks.
	st = b.Await(func(f wstest.Frame) bool {
		return f.Type == "run.status" && f.Run.PendingApproval != nil && f.Run.PendingApproval.ToolCallID == "c4"
	})
	require.Equal(t, "awaiting_approval", st.Run.Status)

	// Revoked from another tab (unknown and malformed ids change nothing).
	later.Send(map[string]any{"type": "approval.revoke", "requestId": "v0", "ruleId": "01234567-89ab-7def-8123-456789abcdef"})
	require.Equal(t, "not_found", later.ReadReply("v0").Code)
	later.SendUnchecked(map[string]any{"type": "approval.revoke", "requestId": "v1", "ruleId": "nope"})
	require.Equal(t, "bad_request", later.ReadReply("v1").Code)
	later.Send(map[string]any{"type": "approval.revoke", "requestId": "v2", "ruleId": rule.RuleID})
	require.Equal(t, "ack", later.ReadReply("v2").Type)
	gone := a.Await(func(f wstest.Frame) bool { return f.Type == "approval.rules" && len(f.Rules) == 0 })
	require.Empty(t, gone.Rules)
	later.Send(map[string]any{"type": "approval.revoke", "requestId": "v3", "ruleId": rule.RuleID})
	require.Equal(t, "not_found", later.ReadReply("v3").Code)

	require.Equal(t, "ack", decide(a, "d4", "c4", "deny").Type)
	require.False(t, (<-d4).Approved)
	// c5 would have matched the revoked rule: it asks.
	st = a.Await(func(f wstest.Frame) bool {
		return f.Type == "run.status" && f.Run.PendingApproval != nil && f.Run.PendingApproval.ToolCallID == "c5"
	})
	require.Equal(t, "awaiting_approval", st.Run.Status)
	require.Equal(t, "ack", decide(a, "d5", "c5", "approve").Type)
	require.True(t, (<-d5).Approved)
	require.Equal(t, "chat.done", a.ReadTerminal().Type)
	b.ReadToSeq(a.State.LastSeq)
	later.ReadToSeq(a.State.LastSeq)
	e.requireConverged(a.State.SessionID, a, b, later)
	require.Empty(t, a.State.ApprovalRules)
}
