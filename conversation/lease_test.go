package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/google/uuid"
)

const leaseTTL = 10 * time.Second

// startNode starts session id's actor as node would, on clock; its leases expire by the
// database's clock (storetest.ExpireLease).
func startNode(t *testing.T, st conversation.Store, agent conversation.Agent, clock clockwork.Clock, node string, id uuid.UUID) *conversation.Actor {
	t.Helper()
	a := conversation.Start(conversation.Config{
		Store: st, Agent: agent, Clock: clock, SuspendOnStop: true,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Lease:  &conversation.LeaseConfig{Node: func() string { return node }, Addr: func() string { return node + ":8080" }, TTL: leaseTTL},
	}, id, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	return a
}

// A node whose lease expired (it stopped renewing: paused, cut off) and was taken over
// cannot write one row afterwards: its run goes on in its memory, but the first write
// it tries is refused by the fence, it stops, and its clients are let go as moved. The
// new holder continues the run from what was stored, and its transcript is intact.
func TestATakenOverNodeWritesNothing(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	ctx := testCtx(t)
	gate := script.NewGate()
	id := uuid.New()
	a := startNode(t, st, script.New(script.Text("from a"), gate.Wait(), script.Text(", too late")), clock, "a", id)
	tabA := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tabA})
	require.NoError(t, err)
	require.NotZero(t, a.LeaseToken())
	first := a.LeaseToken()
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	tabA.Await(t, convtest.Type(conversation.EventDelta))
	require.NoError(t, a.Flush(ctx)) // the segment's row is stored behind its events

	// Node b: refused while a's lease lives, takes over once it has expired.
	b := startNode(t, st, script.New(script.Text("from b")), clock, "b", id)
	err = b.Rescue(ctx)
	require.ErrorIs(t, err, conversation.ErrElsewhere)
	var ee *conversation.ElsewhereError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, store.Lease{Node: "a", Addr: "a:8080", ExpiresAt: ee.Lease.ExpiresAt, Token: first, Live: true}, ee.Lease)

	storetest.ExpireLease(t, st, id) // a stopped renewing (paused, cut off)
	// A hello takes the session over, and continues its run: subscribed in the same
	// step, the tab sees all of the continued run.
	b2 := startNode(t, st, script.New(script.Text("from b")), clock, "b", id)
	tabB := convtest.New()
	_, err = b2.Hello(ctx, conversation.HelloRequest{Subscriber: tabB})
	require.NoError(t, err)
	require.Greater(t, b2.LeaseToken(), first)
	end := tabB.Await(t, convtest.Terminal)
	require.EqualValues(t, conversation.EventChatDone, end.Type)
	require.NoError(t, b2.Flush(ctx))
	stored := storedMessages(t, st, id)

	// a's run goes on, and tries to store its segment and its end.
	require.NoError(t, gate.Pass(ctx))
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the fenced node's actor did not stop")
	}
	require.Equal(t, []conversation.DropReason{conversation.DropMoved}, tabA.DropReasons())
	require.Zero(t, a.LeaseToken())
	require.Equal(t, stored, storedMessages(t, st, id), "a wrote nothing after the takeover")
	for _, m := range stored {
		require.NotContains(t, m.Content, "too late")
	}
	run, err := st.RunLatest(ctx, id)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status, "b's end of the run stands")
	require.Equal(t, 1, run.Recoveries, "b continued it as a run whose process died")
}

func storedMessages(t *testing.T, st conversation.Store, id uuid.UUID) []chat.Message {
	t.Helper()
	msgs, _, err := st.MessagesPath(testCtx(t), id, nil, 0, 100)
	require.NoError(t, err)
	return msgs
}

// A node that was taken over runs no tool call: the call's row is refused by the fence
// (written behind, it is refused, not failed), and the agent must hear that the run
// ended, not that the call may run: the new holder decides whether it runs.
func TestATakenOverNodeRunsNoTool(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	ctx := testCtx(t)
	gate := script.NewGate()
	id := uuid.New()
	toolStart := make(chan error, 1)
	a := startNode(t, st, script.New(script.Text("from a"), gate.Wait(), func(_ context.Context, out conversation.Emitter) error {
		err := out.ToolStart(conversation.ToolCall{ID: "call-1", Name: "shell", Input: []byte(`{"cmd":"rm -rf build"}`)})
		toolStart <- err
		return err
	}), clock, "a", id)
	tabA := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tabA})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	tabA.Await(t, convtest.Type(conversation.EventDelta))
	require.NoError(t, a.Flush(ctx))

	storetest.ExpireLease(t, st, id)
	b := startNode(t, st, script.New(script.Text("from b")), clock, "b", id)
	tabB := convtest.New()
	_, err = b.Hello(ctx, conversation.HelloRequest{Subscriber: tabB})
	require.NoError(t, err)
	tabB.Await(t, convtest.Terminal)
	require.NoError(t, b.Flush(ctx))

	require.NoError(t, gate.Pass(ctx))
	select {
	case err = <-toolStart:
	case <-ctx.Done():
		t.Fatal("the agent did not start its tool call")
	}
	require.ErrorIs(t, err, conversation.ErrRunEnded, "the call must not run: its row was refused")
	for _, m := range storedMessages(t, st, id) {
		require.Nil(t, m.Tool, "a stored no tool call")
	}
}
