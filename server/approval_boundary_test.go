package server

import (
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// Approvals as a security boundary hold across restarts: a decision with another
// input's hash is refused before and after one (the call waits on, with the same hash);
// an approval with scope session makes a rule that approves the next call without
// asking, still after a restart, until a tab revokes it.
func TestApprovalBoundarySurvivesARestart(t *testing.T) {
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := map[string]string{
		"DATABASE_URL":        dbURL,
		"CHATD_DEMO_DELAY":    "5ms",
		"CHATD_DEMO_WORDS":    "10",
		"CHATD_SANDBOX_DIR":   t.TempDir(),
		"CHATD_RECOVER":       "continue",
		"CHATD_IDLE_EVICT":    "1h",
		"CHATD_ABANDON_AFTER": "1h",
	}
	const content = "may I approve a sandbox call"
	require.True(t, demo.MentionsApprove(content))
	wrong := chat.InputHash([]byte(`{"something":"else"}`))
	decide := func(c *wstest.Client, id, runID, callID string, extra map[string]any) wstest.Frame {
		f := map[string]any{"type": "tool.decide", "requestId": id, "runId": runID, "toolCallId": callID, "decision": "approve"}
		for k, v := range extra {
			f[k] = v
		}
		c.Send(f)
		return c.ReadReply(id)
	}

	first := startChild(t, "chatd (killed)", env)
	c := wstest.Dial(t, first.wsURL(), nil)
	session := c.Hello("").SessionID
	ack := c.Chat("r1", content)
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pending := waiting.Run.PendingApproval
	require.Equal(t, chat.InputHash(pending.Input), pending.InputHash)
	require.Equal(t, "conflict", decide(c, "d1", ack.RunID, pending.ToolCallID, map[string]any{"inputHash": wrong}).Code)

	first.signal(syscall.SIGKILL)
	first.wait(15 * time.Second)
	require.Equal(t, chat.RunAwaitingApproval, getRun(t, st, ack.RunID).Status)

	second := restartChild(t, first, "chatd (restarted)", env)
	tab := wstest.Dial(t, second.wsURL(), nil)
	snap := tab.Hello(session)
	require.Equal(t, "awaiting_approval", snap.ActiveRun.Status)
	require.Equal(t, pending.InputHash, snap.ActiveRun.PendingApproval.InputHash, "the same hash across the restart")
	require.Empty(t, snap.ApprovalRules)
	require.Equal(t, "conflict", decide(tab, "d2", ack.RunID, pending.ToolCallID, map[string]any{"inputHash": wrong}).Code)
	reply := decide(tab, "d3", ack.RunID, pending.ToolCallID, map[string]any{"inputHash": pending.InputHash, "scope": "session"})
	require.Equal(t, "ack", reply.Type, "%s", reply.Raw)
	rules := tab.Await(func(f wstest.Frame) bool { return f.Type == "approval.rules" })
	require.Len(t, rules.Rules, 1)
	require.Equal(t, pending.Name, rules.Rules[0].Tool)
	require.Equal(t, "chat.done", tab.ReadTerminal().Type)

	// The next call of the tool runs without asking.
	ack2 := tab.Chat("r2", content)
	require.Equal(t, "ack", ack2.Type, "%s", ack2.Raw)
	start := tab.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" })
	require.Equal(t, "running", start.Message.Tool.Status)
	require.Equal(t, "rule", start.Message.Tool.Decision.Via)
	require.Equal(t, "chat.done", tab.ReadTerminal().Type)

	second.signal(syscall.SIGTERM)
	second.wait(15 * time.Second)

	// Stored: a third process still applies the rule, lists it, and a revoke ends it.
	third := restartChild(t, second, "chatd (restarted again)", env)
	tab = wstest.Dial(t, third.wsURL(), nil)
	snap = tab.Hello(session)
	require.Len(t, snap.ApprovalRules, 1)
	ruleID := snap.ApprovalRules[0].RuleID
	ack3 := tab.Chat("r3", content)
	require.Equal(t, "ack", ack3.Type, "%s", ack3.Raw)
	start = tab.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" })
	require.Equal(t, "running", start.Message.Tool.Status, "the stored rule approves it")
	require.Equal(t, ruleID, start.Message.Tool.Decision.RuleID)
	require.Equal(t, "chat.done", tab.ReadTerminal().Type)

	tab.Send(map[string]any{"type": "approval.revoke", "requestId": "v1", "ruleId": ruleID})
	require.Equal(t, "ack", tab.ReadReply("v1").Type)
	ack4 := tab.Chat("r4", content)
	require.Equal(t, "ack", ack4.Type, "%s", ack4.Raw)
	asks := tab.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	require.NotNil(t, asks.Run.PendingApproval, "revoked: it asks again")

	// The transcript says who decided each call, and how.
	var vias []string
	for _, m := range sessionMessages(t, st, session) {
		if m.Tool != nil && m.Tool.Decision != nil {
			vias = append(vias, m.Tool.Decision.Via)
		}
	}
	require.Equal(t, []string{"ws", "rule", "rule"}, vias)
}
