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

// A message queued behind a run whose process died is stored: the next process shows it
// in its snapshot and starts its run once the recovered run has ended.
func TestQueuedMessageSurvivesARestart(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	d := storeDeadRun(t, st, 0)
	ctx := testCtx(t)
	ok, err := st.QueuedInsert(ctx, chat.Queued{SessionID: d.session, RequestID: "q1", Content: "next", CreatedAt: d.run.StartedAt})
	require.NoError(t, err)
	require.True(t, ok)

	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.Content == "next" {
			return out.Text("the queued one")
		}
		if err := gate.Wait()(ctx, out); err != nil {
			return err
		}
		if err := out.ToolEnd("c1", conversation.ToolResult{Interrupted: true}); err != nil {
			return err
		}
		return out.Text("Done.")
	}}
	a := startOn(t, st, agent, d.session)
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: d.run.ID, Recovery: true})
	require.NoError(t, err)
	s := convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	snap := s.AwaitCatchUp(t, 1).Snapshot
	require.Equal(t, d.run.ID, snap.ActiveRun.ID)
	require.Len(t, snap.Queued, 1)
	require.Equal(t, "next", snap.Queued[0].Content)

	require.NoError(t, gate.Pass(ctx))
	end := s.Await(t, convtest.Terminal)
	require.Equal(t, d.run.ID, end.RunID, "the recovered run ends first")
	started := s.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventChatStarted })
	require.Equal(t, "q1", started.RequestID)
	require.Equal(t, "next", started.Message.Content)
	emptied := s.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventQueue })
	require.Empty(t, emptied.Queued)
	next := s.Await(t, convtest.Terminal)
	require.Equal(t, conversation.EventChatDone, next.Type)
	require.Equal(t, "q1", next.RequestID)

	require.NoError(t, a.Flush(ctx))
	left, err := st.QueuedList(ctx, d.session)
	require.NoError(t, err)
	require.Empty(t, left, "the started message is no longer queued")
	run, err := st.RunByRequest(ctx, d.session, "q1")
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)
	reqs := agent.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "next", reqs[1].Content)
}

// The sender's token (SendRequest.Token) reaches the agent with the run it starts, and
// with a queued message's run too: kept in memory, never in a request of another sender.
func TestSendTokenReachesTheAgent(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ctx := testCtx(t)
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.Content == "first" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
		}
		return out.Text("ok")
	}}
	a := startOn(t, st, agent, uuid.New())
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	s.AwaitCatchUp(t, 1)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "first", Token: "token-1"})
	require.NoError(t, err)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "queued", Token: "token-2", WhileRunning: chat.DoubleTextQueue})
	require.NoError(t, err)
	require.Equal(t, conversation.StatusQueued, res.Status)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r3", Content: "no token", WhileRunning: chat.DoubleTextQueue})
	require.NoError(t, err)
	require.NoError(t, gate.Pass(ctx))
	for range 3 {
		s.Await(t, convtest.Terminal)
	}
	reqs := agent.requests()
	require.Len(t, reqs, 3)
	got := map[string]string{}
	for _, r := range reqs {
		got[r.Content] = r.Token
	}
	require.Equal(t, map[string]string{"first": "token-1", "queued": "token-2", "no token": ""}, got)
}
