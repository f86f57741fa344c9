package conversation_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// A steering message whose run is interrupted before a step boundary is queued: the
// run the interrupting message starts does not take it (it was not sent to that run,
// which may be on another branch, an edit's), and it starts a run of its own after that
// one (found by TestBranchesProperty).
func TestSteeringMessageOfAnInterruptedRunIsQueued(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	gate := script.NewGate()
	var taken []string
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.RequestID == "r1" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
		}
		texts, err := out.(conversation.Steerer).Steering()
		if err != nil {
			return err
		}
		taken = append(taken, texts...) // runs one at a time here
		return out.Text("answer to " + req.Content)
	}}
	a := startOn(t, st, agent, session)
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	s.AwaitCatchUp(t, 1)

	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "question"})
	require.NoError(t, err)
	steer, err := a.Send(ctx, conversation.SendRequest{RequestID: "s1", Content: "and briefly", WhileRunning: chat.DoubleTextSteer})
	require.NoError(t, err)
	require.Equal(t, conversation.StatusSteering, steer.Status)
	require.Equal(t, first.RunID, steer.RunID)
	second, err := a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "another question", WhileRunning: chat.DoubleTextInterrupt})
	require.NoError(t, err)

	end := s.Await(t, func(ev *conversation.Event) bool { return ev.Terminal() && ev.RunID == second.RunID })
	require.Equal(t, conversation.EventChatDone, end.Type)
	own := s.Await(t, convtest.Type(conversation.EventChatStarted))
	require.Equal(t, "s1", own.RequestID, "the steering message starts its own run")
	require.Equal(t, "and briefly", own.Message.Content)
	s.Await(t, convtest.Terminal)
	require.Empty(t, taken, "no run took it as steering")
}
