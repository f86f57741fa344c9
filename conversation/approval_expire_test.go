package conversation_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// An approval waiting across a restart (the run suspended, a new actor takes it up)
// expires at its original deadline: the stored call's created_at plus ApprovalExpire,
// not a fresh ApprovalExpire from the restart. The call is stored denied by its expiry,
// and the model is told.
func TestApprovalExpiresAtItsOriginalDeadlineAcrossARestart(t *testing.T) {
	st := storetest.New(t)
	var runs atomic.Int32
	sh := approvedTool{name: "sh", runs: &runs}
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("a", "sh", `{}`)}},
		modeltest.Say("Nobody approved it."),
	)
	reg, err := agent.NewRegistry(sh)
	require.NoError(t, err)
	// The agent's clock drives the expiry; the actor's stamps created_at. Both start at
	// the same instant (whole microseconds, as PostgreSQL stores it).
	t0 := time.Now().Truncate(time.Second)
	aclock, cclock := clockwork.NewFakeClockAt(t0), clockwork.NewFakeClockAt(t0)
	loop, err := agent.New(agent.Config{Model: model, Tools: reg, Clock: aclock, ModelIdleTimeout: -1, ApprovalExpire: time.Minute})
	require.NoError(t, err)
	session := uuid.New()
	cfg := conversation.Config{Store: st, Agent: loop, Clock: cclock, SuspendOnStop: true}
	ctx := testCtx(t)

	first := conversation.Start(cfg, session, nil)
	s := convtest.New()
	_, err = first.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	sent, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventRunStatus && ev.Run.PendingApproval != nil
	})
	waitTimers(t, aclock, 2) // the approval timeout and the expiry
	aclock.Advance(40 * time.Second)
	require.NoError(t, first.Stop(ctx)) // suspends the run
	require.NoError(t, first.Wait(ctx))

	second := conversation.Start(cfg, session, nil)
	t.Cleanup(func() { _ = second.Stop(context.Background()); _ = second.Wait(context.Background()) })
	s2 := convtest.New()
	_, err = second.Hello(ctx, conversation.HelloRequest{Subscriber: s2})
	require.NoError(t, err)
	waitTimers(t, aclock, 2) // the taken-up wait: its pause and its expiry
	aclock.Advance(20*time.Second - time.Nanosecond)
	require.NoError(t, second.Flush(ctx))
	run, err := st.RunGet(ctx, sent.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunAwaitingApproval, run.Status, "not before the original deadline")
	aclock.Advance(time.Nanosecond)

	end := s2.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventToolEnd && ev.Message.Tool.CallID == "a"
	})
	require.Equal(t, chat.ToolDenied, end.Message.Tool.Status)
	require.Equal(t, conversation.ExpiredOutput, *end.Message.Tool.Output)
	require.Equal(t, chat.DecidedViaExpiry, end.Message.Tool.Decision.Via)
	require.Equal(t, conversation.EventChatDone, s2.Await(t, convtest.Terminal).Type)
	require.Zero(t, runs.Load(), "an expired call does not run")

	msgs, err := st.MessagesByRun(ctx, sent.RunID)
	require.NoError(t, err)
	var stored *chat.ToolCall
	for _, m := range msgs {
		if m.Tool != nil {
			stored = m.Tool
		}
	}
	require.NotNil(t, stored)
	require.Equal(t, chat.ToolDenied, stored.Status)
	require.Equal(t, chat.DecidedViaExpiry, stored.Decision.Via)
	reqs := model.Requests()
	last := reqs[len(reqs)-1].Messages
	require.Equal(t, conversation.ExpiredOutput, last[len(last)-1].Result, "the model is told it expired")

	// Too late for a person: the expiry decided it.
	_, err = second.Decide(ctx, sent.RunID, "a", true)
	require.Error(t, err)
}
