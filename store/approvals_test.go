package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
)

// A tool call's decision is stored with it, from its insert (a call a rule approved) or
// from the update that decides it, and an update without one keeps it.
func TestToolDecisionIsStored(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	rule := uuid.New()
	byRule := chat.Message{
		ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleTool,
		Status: chat.MessageStreaming, CreatedAt: b.now,
		Tool: &chat.ToolCall{CallID: "c1", Name: "shell", Input: json.RawMessage(`{"command":"ls"}`), Status: chat.ToolRunning,
			Decision: &chat.ToolDecision{Approved: true, By: "alice", At: b.now, Via: chat.DecidedViaRule, RuleID: &rule}},
	}
	require.NoError(t, s.MessageInsert(b.ctx, byRule))
	asked := chat.Message{
		ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 3, Role: chat.RoleTool,
		Status: chat.MessageStreaming, CreatedAt: b.now,
		Tool: &chat.ToolCall{CallID: "c2", Name: "shell", Input: json.RawMessage(`{"command":"rm x"}`), Status: chat.ToolAwaitingApproval},
	}
	require.NoError(t, s.MessageInsert(b.ctx, asked))
	at := b.now.Add(time.Minute)
	asked.Tool.Status = chat.ToolRunning
	asked.Tool.Decision = &chat.ToolDecision{Approved: true, By: "bob", At: at, Via: chat.DecidedViaWS}
	require.NoError(t, s.MessageUpdate(b.ctx, asked, chat.MessageStreaming))
	// The end of the call does not carry the decision again; it is kept.
	out := "ok"
	asked.Tool = &chat.ToolCall{CallID: "c2", Name: "shell", Status: chat.ToolOK, Output: &out}
	asked.Status = chat.MessageComplete
	require.NoError(t, s.MessageUpdate(b.ctx, asked, chat.MessageStreaming))

	msgs, err := s.MessagesByRun(b.ctx, run.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	require.Equal(t, &chat.ToolDecision{Approved: true, By: "alice", At: b.now, Via: chat.DecidedViaRule, RuleID: &rule}, msgs[1].Tool.Decision)
	require.Equal(t, &chat.ToolDecision{Approved: true, By: "bob", At: at, Via: chat.DecidedViaWS}, msgs[2].Tool.Decision)
	require.Nil(t, msgs[0].Tool)
}

func TestApprovalRules(t *testing.T) {
	s, b := setup(t)
	cmd := "ls"
	r1 := chat.ApprovalRule{ID: uuid.New(), SessionID: b.session.ID, Tool: "shell", Command: &cmd, CreatedBy: "alice", CreatedVia: chat.DecidedViaWS, ToolCallID: "c1", CreatedAt: b.now}
	r2 := chat.ApprovalRule{ID: uuid.New(), SessionID: b.session.ID, Tool: "search", CreatedBy: "alice", CreatedVia: chat.DecidedViaHTTP, ToolCallID: "c2", CreatedAt: b.now.Add(time.Second)}
	require.NoError(t, s.ApprovalRuleInsert(b.ctx, r1))
	require.NoError(t, s.ApprovalRuleInsert(b.ctx, r2))
	rules, err := s.ApprovalRules(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, []chat.ApprovalRule{r1, r2}, rules)

	other, err := s.ApprovalRules(b.ctx, uuid.New())
	require.NoError(t, err)
	require.Empty(t, other)
	gone, err := s.ApprovalRuleDelete(b.ctx, uuid.New(), r1.ID)
	require.NoError(t, err)
	require.False(t, gone, "another session's rule is not deleted")
	gone, err = s.ApprovalRuleDelete(b.ctx, b.session.ID, r1.ID)
	require.NoError(t, err)
	require.True(t, gone)
	gone, err = s.ApprovalRuleDelete(b.ctx, b.session.ID, r1.ID)
	require.NoError(t, err)
	require.False(t, gone)
	rules, err = s.ApprovalRules(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, []chat.ApprovalRule{r2}, rules)
}
