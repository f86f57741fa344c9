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

// A regeneration's chat.started carries its user message as tabs hold it, branch
// included: an edited question regenerated keeps its "< 1 / 2 >" (found by
// TestBranchesProperty).
func TestRegenerateStartsWithTheQuestionsBranch(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	a := startOn(t, st, &checkpointAgent{}, session)
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	s.AwaitCatchUp(t, 1)

	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "first"})
	require.NoError(t, err)
	started := s.Await(t, convtest.Type(conversation.EventChatStarted))
	s.Await(t, convtest.Terminal)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "edited", EditOf: &started.Message.ID})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	require.NoError(t, a.SelectBranch(ctx, started.Message.ID))

	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "g1", Retry: true, Regenerate: true})
	require.NoError(t, err)
	again := s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == res.RunID
	})
	require.Equal(t, started.Message.ID, again.Message.ID)
	require.NotNil(t, again.Message.Branch, "the question has an edited sibling")
	require.Equal(t, 0, again.Message.Branch.Index)
	require.Len(t, again.Message.Branch.Siblings, 2)
	s.Await(t, convtest.Terminal)

	require.NoError(t, a.Flush(ctx))
	path, _, err := st.MessagesBefore(ctx, session, 0, 10)
	require.NoError(t, err)
	require.Equal(t, path[0].Branch, s.Messages()[0].Branch, "the tab shows the question's branch as stored")
}

// A regeneration whose branch is left before it answers still gives the answer it
// regenerates a sibling: when it writes, tabs (and snapshots) that show the old answer
// get its "< 1 / 2 >" (found by TestBranchesProperty).
func TestRegenerationAnsweringOffThePathBranchesTheShownAnswer(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.RequestID == "g1" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
		}
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
	s.Await(t, convtest.Terminal)
	old := s.Messages()[1]
	require.Equal(t, "answer to question", old.Content)

	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "g1", Retry: true, Regenerate: true})
	require.NoError(t, err)
	s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == res.RunID
	})
	require.NoError(t, a.SelectBranch(ctx, old.ID)) // back to the old answer while the new one waits
	require.Nil(t, s.Messages()[1].Branch, "no other answer is written yet")
	require.NoError(t, gate.Pass(ctx))
	s.Await(t, convtest.Terminal)

	require.NoError(t, a.Flush(ctx))
	shown := s.Messages()
	require.Len(t, shown, 2, "the tab still shows the old answer")
	require.Equal(t, old.ID, shown[1].ID)
	require.NotNil(t, shown[1].Branch, "the old answer has a sibling now")
	require.Equal(t, 0, shown[1].Branch.Index)
	require.Len(t, shown[1].Branch.Siblings, 2)
	path, _, err := st.MessagesBefore(ctx, session, 0, 10)
	require.NoError(t, err)
	require.Equal(t, path[1].Branch, shown[1].Branch, "as stored")
	fresh := convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Subscriber: fresh})
	require.NoError(t, err)
	require.Equal(t, path[1].Branch, fresh.AwaitCatchUp(t, 1).Snapshot.Messages[1].Branch, "and in a snapshot")
}

// Regenerating a regeneration answers the question both answer, also when a steering
// message came before the regeneration wrote anything (its first message is then a
// user message, not its question): the new answer is a sibling of the old one's first
// message, the steering message (protocol.md, Branches).
func TestRegenerateASteeredRegeneration(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.RequestID == "g1" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
			if _, err := out.(conversation.Steerer).Steering(); err != nil {
				return err
			}
		}
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
	s.Await(t, convtest.Terminal)
	question := s.Messages()[0]
	steered, err := a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "g1", Retry: true, Regenerate: true})
	require.NoError(t, err)
	s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == steered.RunID
	})
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "s1", Content: "and briefly", WhileRunning: chat.DoubleTextSteer})
	require.NoError(t, err)
	require.NoError(t, gate.Pass(ctx))
	s.Await(t, convtest.Terminal)

	again, err := a.Continue(ctx, conversation.ContinueRequest{RunID: steered.RunID, RequestID: "g2", Retry: true, Regenerate: true})
	require.NoError(t, err)
	started := s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventChatStarted && ev.RunID == again.RunID
	})
	require.Equal(t, question.ID, started.Message.ID, "the question is answered again, not the steering message")
	s.Await(t, convtest.Terminal)
	reqs := agent.requests()
	require.Equal(t, "question", reqs[len(reqs)-1].Content)
	require.Empty(t, reqs[len(reqs)-1].History)
	require.NoError(t, a.Flush(ctx))
	path, _, err := st.MessagesBefore(ctx, session, 0, 10)
	require.NoError(t, err)
	require.Len(t, path, 2, "the question and its newest answer")
	require.Equal(t, question.ID, *path[1].ParentID)
	require.Len(t, path[1].Branch.Siblings, 3, "the first answer, the steering message, the new answer")
}

// A message written under an active leaf that has children is one of several, also
// when the leaf was read with the session: a regeneration suspended by a restart before
// it answered leaves its question as the leaf, beside the old answer, and the answer the
// next process writes shows "< 2 / 2 >" (found by TestBranchesProperty).
func TestRegenerationContinuedAfterARestartAnswersBesideTheOldAnswer(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.RequestID == "g1" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
		}
		return out.Text("answer to " + req.Content)
	}}
	ctx := testCtx(t)
	cfg := conversation.Config{Store: st, Agent: agent, SuspendOnStop: true}
	a := conversation.Start(cfg, session, nil)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	s.AwaitCatchUp(t, 1)
	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "question"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	question := s.Messages()[0]
	regen, err := a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "g1", Retry: true, Regenerate: true})
	require.NoError(t, err)
	require.NoError(t, a.Stop(ctx)) // suspended, having written nothing
	require.NoError(t, a.Wait(ctx))

	a = conversation.Start(cfg, session, nil)
	t.Cleanup(func() {
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	s = convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Subscriber: s}) // takes the regeneration up
	require.NoError(t, err)
	snap := s.AwaitCatchUp(t, 1).Snapshot
	require.Equal(t, regen.RunID, snap.ActiveRun.ID)
	require.Len(t, snap.Messages, 1, "the path ends at the question")
	require.NoError(t, gate.Pass(ctx))
	answer := s.Await(t, convtest.Type(conversation.EventSegmentStarted))
	require.Equal(t, question.ID, *answer.Message.ParentID)
	require.NotNil(t, answer.Message.Branch, "beside the old answer")
	require.Equal(t, 1, answer.Message.Branch.Index)
	s.Await(t, convtest.Terminal)
	require.NoError(t, a.Flush(ctx))
	path, _, err := st.MessagesBefore(ctx, session, 0, 10)
	require.NoError(t, err)
	require.Equal(t, path[1].Branch, s.Messages()[1].Branch, "as stored")
}

// The same after a restart: a regeneration suspended before it answered, whose branch
// was left for the old answer, gives the old answer its sibling when the next process
// continues it.
func TestContinuedRegenerationOffThePathBranchesTheShownAnswer(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if req.RequestID == "g1" {
			if err := gate.Wait()(ctx, out); err != nil {
				return err
			}
		}
		return out.Text("answer to " + req.Content)
	}}
	ctx := testCtx(t)
	cfg := conversation.Config{Store: st, Agent: agent, SuspendOnStop: true}
	a := conversation.Start(cfg, session, nil)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	s.AwaitCatchUp(t, 1)
	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "question"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	old := s.Messages()[1]
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "g1", Retry: true, Regenerate: true})
	require.NoError(t, err)
	require.NoError(t, a.SelectBranch(ctx, old.ID))
	require.NoError(t, a.Stop(ctx)) // suspended, having written nothing
	require.NoError(t, a.Wait(ctx))

	a = conversation.Start(cfg, session, nil)
	t.Cleanup(func() {
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	s = convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Subscriber: s}) // takes the regeneration up
	require.NoError(t, err)
	require.Len(t, s.AwaitCatchUp(t, 1).Snapshot.Messages, 2, "the old answer is shown")
	require.NoError(t, gate.Pass(ctx))
	s.Await(t, convtest.Terminal)
	require.NoError(t, a.Flush(ctx))
	shown := s.Messages()
	require.Equal(t, old.ID, shown[1].ID)
	require.NotNil(t, shown[1].Branch, "the old answer has a sibling now")
	path, _, err := st.MessagesBefore(ctx, session, 0, 10)
	require.NoError(t, err)
	require.Equal(t, path[1].Branch, shown[1].Branch, "as stored")
}
