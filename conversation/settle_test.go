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

// A tool call is running when an insert's answer is lost (the run fails as storage).
// finish ends the tool (tool.end goes out); that update fails and is kept for a retry.
// Settling the run's stray rows (same finish) must leave the kept row to its own update:
// settled first, the guarded retry would be refused, and the database would never get
// what clients were told.
func TestSettlingLeavesKeptUpdatesToTheirRetry(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	gate := script.NewGate()
	st, a, live := faultSetup(t, script.New(script.ToolStart("c1", "t", `{}`), script.ToolOutput("c1", "partial"), gate.Wait(), script.Text("after")), clock)
	ctx := context.Background()
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	live.Await(t, func(f *conversation.Event) bool { return f.Type == "tool.output" })

	st.set("MessageInsert", failAfter, 1)  // the segment's row commits, its answer is lost
	st.set("MessageUpdate", failBefore, 1) // the tool's closing write fails once
	require.NoError(t, gate.Pass(testCtx(t)))
	require.EqualValues(t, "chat.error", live.Await(t, convtest.Terminal).Type)
	view := live.Messages()

	a.Unsubscribe(ctx, live)
	waitTimers(t, clock, 1) // the retry of the kept tool update
	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // now idle: nothing left to store
	db := stored(t, st.Store, a.SessionID())
	require.Len(t, view, 2)
	require.Empty(t, convtest.Diff(view, db[:2]), "what clients were told vs the database (the stray row aside)")
	require.Len(t, db, 3)
	require.Equal(t, chat.MessageError, db[2].Status, "the stray row is settled")
}
