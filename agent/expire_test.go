package agent_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// A call nobody decides within ApprovalExpire is denied: stored as such, recorded as
// decided by its expiry, and the model is told it expired. A call decided in time is not.
func TestApprovalExpireDeniesAndTellsTheModel(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", "true")}},
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "rm -rf build")}},
		modeltest.Say("It expired, so I did not remove it."),
	)
	h, _ := sandboxHarness(t, model, func(c *agent.Config) { c.ApprovalExpire = time.Minute })
	h.send("remove the build")

	// Decided in time: runs.
	h.awaitStatus("awaiting_approval")
	h.waitTimers(2) // the approval timeout and the expiry
	h.clock.Advance(30 * time.Second)
	require.Equal(t, chat.RunRunning, h.decide("s1", true).Status)
	end := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	require.Equal(t, "ok", end.Message.Tool.Status)

	// Not decided: denied at its deadline, a minute after it was asked.
	st := h.awaitStatus("awaiting_approval")
	require.Equal(t, "s2", st.Run.PendingApproval.ToolCallID)
	h.waitTimers(2)
	h.clock.Advance(59 * time.Second)
	h.waitTimers(2) // not yet
	h.clock.Advance(time.Second)
	denied := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" && f.Message.Tool.CallID == "s2" })
	require.Equal(t, "denied", denied.Message.Tool.Status)
	require.Equal(t, conversation.ExpiredOutput, *denied.Message.Tool.Output)
	require.Equal(t, "expiry", denied.Message.Tool.Decision.Via)
	require.False(t, denied.Message.Tool.Decision.Approved)
	require.Equal(t, "chat.done", h.end().Type)

	msgs := h.stored()
	var s2 *wstest.Message
	for i, m := range msgs {
		if m.Tool != nil && m.Tool.CallID == "s2" {
			s2 = &msgs[i]
		}
	}
	require.NotNil(t, s2)
	require.Equal(t, "denied", s2.Tool.Status)
	require.Equal(t, "expiry", s2.Tool.Decision.Via)
	reqs := model.Requests()
	require.Len(t, reqs, 3)
	last := reqs[2].Messages[len(reqs[2].Messages)-1]
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "s2", ToolName: "shell", Result: conversation.ExpiredOutput, IsError: true}, last)

	// Too late: the expiry decided it.
	_, err := h.actor.Decide(t.Context(), uuid.MustParse(st.Run.RunID), "s2", true)
	require.Error(t, err)
}

// An approval taken up after a restart (from the run's checkpoint) expires at its
// original deadline: the stored call's created_at plus ApprovalExpire, not a fresh
// ApprovalExpire from when this process took it up; one whose deadline passed while no
// process ran is denied at once.
func TestCheckpointApprovalExpiresAtItsStoredDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		waited time.Duration
		left   time.Duration
	}{
		{"fifty seconds waited", 50 * time.Second, 10 * time.Second},
		{"deadline passed meanwhile", time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			deploy := counted(agent.ToolSpec{Name: "deploy", NeedsApproval: true}, &runs, func(json.RawMessage, agent.Env) string { return "deployed" })
			model := modeltest.New(modeltest.Say("It expired."))
			reg, err := agent.NewRegistry(deploy)
			require.NoError(t, err)
			clock := clockwork.NewFakeClock()
			l, err := agent.New(agent.Config{Model: model, Tools: reg, Clock: clock, ModelIdleTimeout: -1, ApprovalExpire: time.Minute})
			require.NoError(t, err)
			rec := &agenttest.Recorder{Hold: make(chan string, 1)}
			waiting := called("s1", "deploy", `{}`, "", chat.ToolAwaitingApproval)
			waiting.CreatedAt = clock.Now().Add(-tc.waited)
			done := continueRun(t, l, rec, conversation.Request{Content: "deploy", Checkpoint: []chat.Message{waiting}})
			agenttest.Wait(t, rec.Hold, "the wait")

			if tc.left > 0 {
				ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
				defer cancel()
				require.NoError(t, clock.BlockUntilContext(ctx, 2)) // the approval timeout and the expiry
				clock.Advance(tc.left - time.Nanosecond)
				require.Equal(t, []string{"tool.await: s1"}, rec.Log(), "not before the stored deadline")
				clock.Advance(time.Nanosecond)
			}
			require.NoError(t, agenttest.Wait(t, done, "the run"))
			require.Equal(t, []string{"tool.await: s1", "expire: s1", "text: It expired."}, rec.Log())
			require.Zero(t, runs.Load(), "an expired call does not run")
			reqs := model.Requests()
			require.Len(t, reqs, 1)
			last := reqs[0].Messages[len(reqs[0].Messages)-1]
			require.Equal(t, conversation.ExpiredOutput, last.Result)
		})
	}
}
