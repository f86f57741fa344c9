package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
)

// Writes stored behind fail one after another: a segment's insert whose answer is lost
// (it committed), then its update. The run goes on (its writes are stored behind it, and
// may pass on a retry); the queue stops at each failure and goes on with it in order, so
// the retried insert finds its own row, nothing queued behind a failure overtakes it,
// and the database ends with exactly what clients were told: no stray row and no
// refused update.
func TestFailedWritesAreStoredInOrder(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	gate := script.NewGate()
	st, a, live := faultSetup(t, script.New(script.ToolStart("c1", "t", `{}`), script.ToolOutput("c1", "partial"), gate.Wait(), script.Text("after")), clock)
	ctx := context.Background()
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "tool.output" })
	require.NoError(t, a.Flush(ctx))

	st.set("MessageInsert", failAfter, 1)  // the segment's row commits, its answer is lost
	st.set("MessageUpdate", failBefore, 1) // the next update fails once
	require.NoError(t, gate.Pass(testCtx(t)))
	end := live.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.done", end.Type, "the run goes on: what failed may pass on a retry")
	view := live.Messages()
	require.Len(t, view, 3)
	require.Equal(t, chat.ToolError, view[1].Tool.Status, "the call ends with the run")
	require.Equal(t, "after", view[2].Content)

	a.Unsubscribe(ctx, live)
	waitTimers(t, clock, 1) // the retry: the insert finds its row, the update fails
	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // the next retry, 2s later
	clock.Advance(2 * time.Second)
	waitTimers(t, clock, 1) // now idle: nothing left to store
	require.Empty(t, convtest.Diff(view, stored(t, st.Store, a.SessionID())))
	require.Empty(t, convtest.Diff(view, snapshotOf(t, a)), "what a new tab sees")
}
