package ws_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

func decide(c *wstest.Client, requestID, callID, decision string) wstest.Frame {
	c.Send(map[string]any{"type": "tool.decide", "requestId": requestID, "toolCallId": callID, "decision": decision})
	return c.ReadReply(requestID)
}

func awaitStatus(c *wstest.Client, status string) wstest.Frame {
	return c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == status })
}

// An approval-gated call waits, is shown to every tab with the run awaiting approval, and
// runs once one tab approves.
func TestApprovalApproveFromOneTabWhileAnotherWatches(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	e := newEnv(t, envOptions{agent: script.New(
		script.Text("I need to run something."),
		script.Approval("c1", "shell", `{"command": "ls"}`, "file.txt", decided),
		script.Text(" Done."),
	)})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Equal(t, "ack", a.Chat("r1", "list files").Type)

	for _, tab := range []*wstest.Client{a, b} {
		start := tab.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" })
		require.Equal(t, "awaiting_approval", start.Message.Tool.Status)
		st := awaitStatus(tab, "awaiting_approval")
		require.NotNil(t, st.Run.PendingApproval)
		require.Equal(t, "c1", st.Run.PendingApproval.ToolCallID)
		require.Equal(t, "shell", st.Run.PendingApproval.Name)
		require.JSONEq(t, `{"command": "ls"}`, string(st.Run.PendingApproval.Input))
	}
	require.Equal(t, "awaiting_approval", string(storedRun(t, e, a.State.SessionID, "r1").Status))

	ack := decide(a, "d1", "c1", "approve")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "running", ack.Status)
	require.True(t, (<-decided).Approved)

	for _, tab := range []*wstest.Client{a, b} {
		running := tab.Await(func(f wstest.Frame) bool { return f.Type == "tool.update" })
		require.Equal(t, "running", running.Message.Tool.Status)
		st := awaitStatus(tab, "running")
		require.Nil(t, st.Run.PendingApproval)
		end := tab.Await(func(f wstest.Frame) bool { return f.Type == "tool.end" })
		require.Equal(t, "ok", end.Message.Tool.Status)
		require.Equal(t, "chat.done", tab.ReadTerminal().Type)
	}
	e.requireConverged(a.State.SessionID, a, b)
}

func TestApprovalDeny(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	e := newEnv(t, envOptions{agent: script.New(
		script.Approval("c1", "shell", `{"command": "rm -rf /"}`, "never", decided),
		script.Text("Understood, I will not run it."),
	)})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "clean up").Type)
	awaitStatus(c, "awaiting_approval")

	ack := decide(c, "d1", "c1", "deny")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.False(t, (<-decided).Approved)
	end := c.Await(func(f wstest.Frame) bool { return f.Type == "tool.end" })
	require.Equal(t, "denied", end.Message.Tool.Status)
	require.Equal(t, conversation.DeclinedOutput, *end.Message.Tool.Output)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)

	msgs := e.dbMessages(c.State.SessionID)
	require.Equal(t, "denied", msgs[1].Tool.Status)
	require.Equal(t, "Understood, I will not run it.", msgs[2].Content)
	e.requireConverged(c.State.SessionID, c)

	// A later decision on the call of the run that just ended: conflict.
	late := decide(c, "d2", "c1", "approve")
	require.Equal(t, "conflict", late.Code, "the call was decided and its run is over")
	require.Equal(t, "not_found", decide(c, "d3", "never-existed", "approve").Code)
}

// Two tabs decide at once: exactly one wins, the other gets conflict.
func TestApprovalTwoTabsRace(t *testing.T) {
	t.Parallel()
	for range 5 {
		decided := make(chan conversation.Decision, 1)
		e := newEnv(t, envOptions{agent: script.New(script.Approval("c1", "t", `{}`, "out", decided))})
		a := e.session()
		b := e.join(a.State.SessionID)
		require.Equal(t, "ack", a.Chat("r1", "go").Type)
		awaitStatus(a, "awaiting_approval")
		awaitStatus(b, "awaiting_approval")

		replies := make([]wstest.Frame, 2)
		var wg sync.WaitGroup
		for i, tab := range []*wstest.Client{a, b} {
			decision := []string{"approve", "deny"}[i]
			wg.Go(func() {
				tab.Send(map[string]any{"type": "tool.decide", "requestId": "d", "toolCallId": "c1", "decision": decision})
				for {
					f, err := tab.TryRead()
					if err != nil {
						return
					}
					if f.Type == "ack" || f.Type == "error" {
						replies[i] = f
						return
					}
				}
			})
		}
		wg.Wait()
		acks, conflicts := 0, 0
		for _, r := range replies {
			switch {
			case r.Type == "ack":
				acks++
			case r.Code == "conflict":
				conflicts++
			}
		}
		require.Equal(t, 1, acks, "%v", replies)
		require.Equal(t, 1, conflicts, "%v", replies)
		d := <-decided
		a.ReadTerminal()
		tool := e.dbMessages(a.State.SessionID)[1].Tool
		if d.Approved {
			require.Equal(t, "ok", tool.Status)
		} else {
			require.Equal(t, "denied", tool.Status)
		}
	}
}

// A tab that connects while the run waits, or is paused, finds the pending approval in
// its snapshot, and can decide.
func TestApprovalInSnapshotWhileWaitingAndPaused(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	var decisions <-chan conversation.Decision
	e := newEnv(t, envOptions{agent: script.New(
		script.AwaitOnly("c1", "shell", `{"command": "make"}`, &decisions),
		gate.Wait(),
		script.Paused(),
		func(ctx context.Context, out conversation.Emitter) error {
			select {
			case d := <-decisions:
				if d.Approved {
					return out.ToolEnd("c1", conversation.ToolResult{Output: "built"})
				}
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	)})
	a := e.session()
	require.Equal(t, "ack", a.Chat("r1", "build it").Type)
	awaitStatus(a, "awaiting_approval")

	waiting := e.join(a.State.SessionID)
	require.NotNil(t, waiting.State.ActiveRun)
	require.Equal(t, "awaiting_approval", waiting.State.ActiveRun.Status)
	require.Equal(t, "c1", waiting.State.ActiveRun.PendingApproval.ToolCallID)
	require.Equal(t, "awaiting_approval", waiting.State.Sorted()[1].Tool.Status)

	require.NoError(t, gate.Pass(testCtx(t)))
	awaitStatus(a, "paused")
	require.Equal(t, "paused", string(storedRun(t, e, a.State.SessionID, "r1").Status))
	a.WS.CloseNow() // everyone leaves; a paused run is not abandoned (see the abandonment tests)

	later := e.join(a.State.SessionID)
	require.Equal(t, "paused", later.State.ActiveRun.Status)
	require.Equal(t, "c1", later.State.ActiveRun.PendingApproval.ToolCallID)
	require.JSONEq(t, `{"command": "make"}`, string(later.State.ActiveRun.PendingApproval.Input))

	ack := decide(later, "d1", "c1", "approve")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "chat.done", later.ReadTerminal().Type)
	waiting.ReadToSeq(later.State.LastSeq)
	e.requireConverged(later.State.SessionID, later, waiting)
}

func TestCancelDuringApprovalWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("about to ask"), script.Approval("c1", "shell", `{}`, "x", nil))})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "go").Type)
	awaitStatus(c, "awaiting_approval")

	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x"})
	require.Equal(t, "ack", c.ReadReply("x").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.cancelled", end.Type)
	require.Equal(t, "user", end.Run.CancelReason)
	require.Nil(t, end.Run.PendingApproval)

	msgs := e.dbMessages(c.State.SessionID)
	require.Equal(t, "cancelled", msgs[2].Status)
	require.Equal(t, "cancelled", msgs[2].Tool.Status)
	run := storedRun(t, e, c.State.SessionID, "r1")
	require.Equal(t, chat.RunCancelled, run.Status)
	require.Equal(t, chat.CancelUser, run.CancelReason)
	e.requireConverged(c.State.SessionID, c)

	// The decision comes too late.
	require.Equal(t, "conflict", decide(c, "d", "c1", "approve").Code)
}

func TestDecideErrors(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(
		script.Tool("t0", "plain", `{}`, "done"),
		script.Approval("c1", "t", `{}`, "x", decided),
		gate.Wait(), // the run stays active while the late decision arrives
	)})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "go").Type)
	awaitStatus(c, "awaiting_approval")
	require.Equal(t, "not_found", decide(c, "a", "nope", "approve").Code)
	require.Equal(t, "conflict", decide(c, "b", "t0", "approve").Code, "a call that never waited for approval")
	require.Equal(t, "ack", decide(c, "c", "c1", "approve").Type)
	<-decided
	require.Equal(t, "conflict", decide(c, "d", "c1", "deny").Code, "the first decision won")
	require.NoError(t, gate.Pass(testCtx(t)))
	c.ReadTerminal()
}

// A decision that names its run cannot approve a call of another run that reused the id.
func TestDecideNamesItsRun(t *testing.T) {
	t.Parallel()
	decided := make(chan conversation.Decision, 1)
	e := newEnv(t, envOptions{agent: script.New(script.Approval("c1", "t", `{}`, "x", decided))})
	c := e.session()
	ack := c.Chat("r1", "go")
	awaitStatus(c, "awaiting_approval")
	c.Send(map[string]any{"type": "tool.decide", "requestId": "wrong", "runId": "01a1fb2f-0000-7000-8000-000000000000", "toolCallId": "c1", "decision": "approve"})
	require.Equal(t, "conflict", c.ReadReply("wrong").Code)
	c.SendUnchecked(map[string]any{"type": "tool.decide", "requestId": "bad", "runId": "nope", "toolCallId": "c1", "decision": "approve"})
	require.Equal(t, "bad_request", c.ReadReply("bad").Code)
	c.Send(map[string]any{"type": "tool.decide", "requestId": "right", "runId": ack.RunID, "toolCallId": "c1", "decision": "approve"})
	require.Equal(t, "ack", c.ReadReply("right").Type)
	<-decided
	c.ReadTerminal()
}
