package ws_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/wstest"
)

// chat.resume and chat.dismiss over real connections: a cancelled run is resumable in
// its terminal event and in a later tab's snapshot; resuming it makes it active again in
// every tab, once per requestId; two tabs racing get one winner; a completed run is
// neither resumable nor dismissable.
func TestResumeAndDismissOverTheWire(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(script.Text("part "), gate.Wait(), script.Text("done"))})
	a := e.session()
	ack := a.Chat("r1", "go")
	require.Equal(t, "ack", ack.Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" }) // it may come before the ack
	a.Send(map[string]any{"type": "chat.cancel", "requestId": "c1"})
	end := a.ReadTerminal()
	require.Equal(t, "chat.cancelled", end.Type)
	require.True(t, end.Run.Resumable)

	b := e.join(a.State.SessionID)
	require.Nil(t, b.State.ActiveRun)
	require.NotNil(t, b.State.LastRun)
	require.Equal(t, "cancelled", b.State.LastRun.Status)
	require.True(t, b.State.LastRun.Resumable)

	a.Send(map[string]any{"type": "chat.resume", "requestId": "res1", "runId": ack.RunID})
	resumed := a.ReadReply("res1")
	require.Equal(t, "ack", resumed.Type, "%s", resumed.Raw)
	require.Equal(t, "running", resumed.Status)
	require.Equal(t, ack.RunID, resumed.RunID)
	st := b.ReadType("run.status")
	require.Equal(t, "running", st.Run.Status, "the other tab sees the run active again")

	// The same request again: a duplicate; another tab's resume: the run is active.
	a.Send(map[string]any{"type": "chat.resume", "requestId": "res1", "runId": ack.RunID})
	require.True(t, a.ReadReply("res1").Duplicate)
	b.Send(map[string]any{"type": "chat.resume", "requestId": "res2", "runId": ack.RunID})
	require.Equal(t, "run_active", b.ReadReply("res2").Code)

	require.NoError(t, gate.Pass(t.Context()))
	require.Equal(t, "chat.done", a.ReadTerminal().Type)
	require.Equal(t, "chat.done", b.ReadTerminal().Type)

	b.Send(map[string]any{"type": "chat.dismiss", "requestId": "d1", "runId": ack.RunID})
	require.Equal(t, "conflict", b.ReadReply("d1").Code)
	a.Send(map[string]any{"type": "chat.resume", "requestId": "res3", "runId": ack.RunID})
	require.Equal(t, "conflict", a.ReadReply("res3").Code)
}

// chat.resume with mode retry over the wire: a new run answers the same user message,
// every tab sees the path go back to it (branch.selected) and the run start with the
// original userMessage, and a later snapshot shows the new answer as the second of two.
func TestRetryOverTheWire(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(script.Text("answer"), gate.Wait())})
	a := e.session()
	first := a.Chat("r1", "go")
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" }) // it may come before the ack
	a.Send(map[string]any{"type": "chat.cancel", "requestId": "c1"})
	require.Equal(t, "chat.cancelled", a.ReadTerminal().Type)
	user := a.State.Sorted()[0]

	a.Send(map[string]any{"type": "chat.resume", "requestId": "again", "runId": first.RunID, "mode": "retry"})
	ack := a.ReadReply("again")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.NotEqual(t, first.RunID, ack.RunID)
	sel := a.Await(func(f wstest.Frame) bool { return f.Type == "branch.selected" })
	require.Len(t, sel.Messages, 1, "the path up to the user message")
	require.Equal(t, user.ID, sel.Messages[0].ID)
	started := a.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" && f.RunID == ack.RunID })
	require.Equal(t, ack.RunID, started.RunID)
	require.Equal(t, user.ID, started.UserMessage.ID, "the same user message")
	require.NoError(t, gate.Pass(t.Context()))
	require.Equal(t, "chat.done", a.ReadTerminal().Type)

	b := e.join(a.State.SessionID)
	msgs := b.State.Sorted()
	require.Len(t, msgs, 2)
	require.Equal(t, "answer", msgs[1].Content)
	require.Equal(t, user.ID, msgs[1].ParentID)
	require.Equal(t, 1, msgs[1].Branch.Index)
	require.Len(t, msgs[1].Branch.Siblings, 2)
	require.Empty(t, wstest.Diff(msgs, a.State.Sorted()), "the watching tab equals a new tab's snapshot")
}
