package ws_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/wstest"
)

// A tab that watches a retry follows the path back to the user message (branch.selected)
// and the new answer onto it: it ends equal to a new tab's snapshot.
func TestRetryWatcherMatchesASnapshot(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(script.Text("answer"), gate.Wait())})
	a := e.session()
	first := a.Chat("r1", "go")
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" }) // it may come before the ack
	a.Send(map[string]any{"type": "chat.cancel", "requestId": "c1"})
	require.Equal(t, "chat.cancelled", a.ReadTerminal().Type)
	a.Send(map[string]any{"type": "chat.resume", "requestId": "again", "runId": first.RunID, "mode": "retry"})
	require.Equal(t, "ack", a.ReadReply("again").Type)
	require.NoError(t, gate.Pass(t.Context()))
	require.Equal(t, "chat.done", a.ReadTerminal().Type)

	b := e.join(a.State.SessionID)
	require.Empty(t, wstest.Diff(b.State.Sorted(), a.State.Sorted()), "the watching tab equals a new tab's snapshot")
}

// A tab that holds a resumable lastRun learns from the dismiss's run.status that it is no
// longer resumable (so it hides its resume card), and from a resume that it is active.
func TestDismissAndResumeUpdateLastRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("part "), script.Hang())})
	a := e.session()
	ack := a.Chat("r1", "go")
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" }) // it may come before the ack
	a.Send(map[string]any{"type": "chat.cancel", "requestId": "c1"})
	require.Equal(t, "chat.cancelled", a.ReadTerminal().Type)
	b := e.join(a.State.SessionID)
	require.True(t, b.State.LastRun.Resumable)
	a.Send(map[string]any{"type": "chat.dismiss", "requestId": "d1", "runId": ack.RunID})
	require.Equal(t, "ack", a.ReadReply("d1").Type)
	b.ReadType("run.status")
	require.False(t, b.State.LastRun.Resumable, "the tab still offers to resume a dismissed run")
}
