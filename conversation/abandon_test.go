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
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// abandonSetup starts a run that streams and then waits (at a gate, or for an approval)
// with one subscriber, and returns the pieces. Abandonment runs as the service chatd
// starts (Deadlines), on the fake clock.
func abandonSetup(t *testing.T, steps ...script.Step) (*store.Store, *clockwork.FakeClock, *conversation.Actor, *convtest.Recorder) {
	t.Helper()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	abandonments := conversation.NewDeadlines("abandonment", clock)
	require.NoError(t, abandonments.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, abandonments.Stop(context.Background())) })
	a := startActorWithClock(t, st, script.New(steps...), clock, func(c *conversation.Config) { c.Abandonments = abandonments })
	s := convtest.New()
	ctx := context.Background()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	return st, clock, a, s
}

func TestAbandonedRunIsCancelled(t *testing.T) {
	t.Parallel()
	st, clock, a, s := abandonSetup(t, script.Text("streaming"), script.Hang())
	ctx := context.Background()

	a.Unsubscribe(ctx, s)
	waitTimers(t, clock, 1) // the abandonment timer, armed when the last subscriber left
	clock.Advance(conversation.DefaultAbandonAfter - time.Second)
	roundTrip(t, a)
	run, err := st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status, "not yet")

	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // now idle: the run is over, the eviction timer is armed
	run, err = st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunCancelled, run.Status)
	require.Equal(t, chat.CancelAbandoned, run.CancelReason)
	msgs, _, err := st.MessagesBefore(ctx, a.SessionID(), 0, 10)
	require.NoError(t, err)
	require.Equal(t, "streaming", msgs[1].Content)
	require.Equal(t, chat.MessageCancelled, msgs[1].Status)
}

func TestWatchedRunIsNeverAbandoned(t *testing.T) {
	t.Parallel()
	st, clock, a, s := abandonSetup(t, script.Text("streaming"), script.Hang())
	ctx := context.Background()
	for range 10 {
		clock.Advance(conversation.DefaultAbandonAfter)
	}
	roundTrip(t, a)
	run, err := st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status)

	// A subscriber that comes back in time resets the clock.
	a.Unsubscribe(ctx, s)
	waitTimers(t, clock, 1)
	clock.Advance(conversation.DefaultAbandonAfter - time.Minute)
	back := convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: back})
	require.NoError(t, err)
	clock.Advance(time.Hour)
	roundTrip(t, a)
	run, err = st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status)
}

// A run waiting for an approval waits indefinitely, watched or not.
func TestRunAwaitingApprovalIsNotAbandoned(t *testing.T) {
	t.Parallel()
	st, clock, a, s := abandonSetup(t, script.Text("asking"), script.Approval("c1", "t", `{}`, "x", nil))
	ctx := context.Background()
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "run.status" })
	a.Unsubscribe(ctx, s)
	roundTrip(t, a)
	clock.Advance(100 * conversation.DefaultAbandonAfter)
	roundTrip(t, a)
	run, err := st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunAwaitingApproval, run.Status)
}

// roundTrip makes the actor handle one intent: everything queued before it is done, and
// the writes it made are stored (or wait for a retry).
func roundTrip(t *testing.T, a *conversation.Actor) {
	t.Helper()
	_, err := a.History(context.Background(), 0, 1)
	require.NoError(t, err)
	_ = a.Flush(context.Background()) // an error: a write waits for its retry
}
