package conversation_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

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
