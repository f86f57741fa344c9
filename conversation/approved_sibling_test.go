package conversation_test

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
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

type approvedTool struct {
	name string
	runs *atomic.Int32
}

func (a approvedTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: a.name, Description: a.name, NeedsApproval: true}
}
func (a approvedTool) Run(context.Context, json.RawMessage, agent.Env) (string, error) {
	a.runs.Add(1)
	return "ran", nil
}

// One step with two calls that need approval: the first is approved, the second still
// waits, and the actor goes (a rolling restart suspends the run; or, with nobody
// watching, it is evicted). The approved call has not run (a step's calls run once every
// decision is in), so the continuation runs it with the step; it is not cut off.
func TestApprovedCallOfAWaitingStepRunsAfterTheActorWent(t *testing.T) {
	for _, how := range []string{"restart", "evicted"} {
		t.Run(how, func(t *testing.T) {
			st := storetest.New(t)
			var runs atomic.Int32
			sh := approvedTool{name: "sh", runs: &runs}
			model := modeltest.New(
				modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("a", "sh", `{}`), modeltest.Call("b", "sh", `{}`)}},
				modeltest.Say("Done."),
			)
			loop, _ := agenttest.NewLoop(t, model, sh)
			session := uuid.New()
			clock := clockwork.NewFakeClock()
			cfg := conversation.Config{Store: st, Agent: loop, Clock: clock, SuspendOnStop: true, IdleTimeout: time.Minute}
			first := conversation.Start(cfg, session, nil)
			ctx := testCtx(t)
			s := convtest.New()
			_, err := first.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
			require.NoError(t, err)
			sent, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
			require.NoError(t, err)
			s.Await(t, func(ev *conversation.Event) bool {
				return ev.Type == conversation.EventRunStatus && ev.Run.PendingApproval != nil && ev.Run.PendingApproval.ToolCallID == "a"
			})
			_, err = first.Decide(ctx, sent.RunID, "a", true)
			require.NoError(t, err)
			if how == "restart" {
				require.NoError(t, first.Stop(ctx))
			} else {
				s.Await(t, func(ev *conversation.Event) bool {
					return ev.Type == conversation.EventRunStatus && ev.Run.PendingApproval != nil && ev.Run.PendingApproval.ToolCallID == "b"
				})
				first.Unsubscribe(ctx, s)            // the tab closes; the run waits on b
				require.NoError(t, first.Flush(ctx)) // idle once its writes are stored
				waitTimers(t, clock, 1)
				clock.Advance(time.Minute) // evicted
			}
			require.NoError(t, first.Wait(ctx))
			require.Zero(t, runs.Load(), "a waits for b's decision before it runs")

			second := conversation.Start(cfg, session, nil)
			t.Cleanup(func() { _ = second.Stop(context.Background()); _ = second.Wait(context.Background()) })
			s2 := convtest.New()
			_, err = second.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s2})
			require.NoError(t, err)
			_, err = second.Decide(ctx, sent.RunID, "b", true)
			require.NoError(t, err)
			require.Equal(t, conversation.EventChatDone, s2.Await(t, convtest.Terminal).Type)
			for _, m := range s2.Messages() {
				if m.Tool != nil {
					require.Equal(t, chat.ToolOK, m.Tool.Status, "call %s was approved and never ran", m.Tool.CallID)
				}
			}
			require.EqualValues(t, 2, runs.Load(), "both approved calls run")
		})
	}
}
