package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// A late writer cannot rewrite a run that has ended. Here the run waits for an approval
// when something else (another process, an operator) ends it in the database; the
// actor's later writes (the approval's status change, the run's end, the tool's result)
// are refused, counted, and leave every row as the other writer left it.
func TestLateWritesToAnEndedRunChangeNothing(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	a := startMetered(t, st, script.New(script.Approval("c1", "lookup", `{}`, "result", nil)), nil)
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, func(ev *conversation.Event) bool {
		return ev.Type == conversation.EventRunStatus && ev.Run.Status == chat.RunAwaitingApproval
	})
	require.NoError(t, a.Flush(ctx)) // the call's row is stored behind its event

	// Another writer ends the run and its open tool call.
	run, err := st.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	ended := time.Now()
	run.Status, run.EndedAt = chat.RunInterrupted, &ended
	run.Error = &chat.ErrorInfo{Code: "interrupted", Message: "ended elsewhere"}
	require.NoError(t, st.RunUpdate(ctx, run, chat.ActiveRunStatuses()...))
	_, err = st.MessagesSettleRun(ctx, res.RunID, chat.MessageInterrupted, ended)
	require.NoError(t, err)
	before, _, err := st.MessagesBefore(ctx, a.SessionID(), 0, 100)
	require.NoError(t, err)
	runBefore, err := st.RunGet(ctx, res.RunID)
	require.NoError(t, err)

	// The actor, which does not know, goes on: approve, the tool ends (its result is
	// refused, which ends the run on this side too), the run ends.
	_, err = a.Decide(ctx, res.RunID, "c1", true)
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	roundTrip(t, a.Actor) // and its writes are made

	after, _, err := st.MessagesBefore(ctx, a.SessionID(), 0, 100)
	require.NoError(t, err)
	require.Equal(t, before, after, "no message changed")
	runAfter, err := st.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	require.Equal(t, runBefore, runAfter, "the run is as the other writer left it")

	// Refused: the approval's run status and the run's end; the tool message's approval
	// and its end.
	require.EqualValues(t, 2, a.value(t, "chatd_writes_refused_total", "table", "runs"))
	require.EqualValues(t, 2, a.value(t, "chatd_writes_refused_total", "table", "messages"))

	// Nothing waits for a retry: the actor can go idle.
	a.Unsubscribe(ctx, s)
	waitTimers(t, a.clock, 1) // the idle timer, and no retry timer
}

// A refused write is not retried, and does not keep the actor from going idle, even when
// it was first kept for a retry because the database failed.
func TestRefusedRetryIsDropped(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	a := startMetered(t, st, script.New(script.Text("done soon")), nil)
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)

	st.set("RunUpdate", failBefore, -1)
	res, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)

	// While the retry waits, another writer ends the run.
	run, err := st.Store.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	run.Status = chat.RunCancelled
	require.NoError(t, st.Store.RunUpdate(ctx, run, chat.ActiveRunStatuses()...))
	st.clear()

	a.Unsubscribe(ctx, s)
	waitTimers(t, a.clock, 1) // the retry
	a.clock.Advance(time.Second)
	waitTimers(t, a.clock, 1) // idle: the refused write was dropped, not kept
	require.EqualValues(t, 1, a.value(t, "chatd_writes_refused_total", "table", "runs"))
	got, err := st.Store.RunGet(ctx, res.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunCancelled, got.Status)
}

// Wait whose context ends first leaves no goroutine behind.
func TestWaitLeavesNoGoroutine(t *testing.T) {
	a := startActor(t, storetest.New(t), script.New())
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, a.Wait(ctx), context.Canceled)
}
