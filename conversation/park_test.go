package conversation_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// An actor with nothing to do gives its loop's goroutine back: a session that is only
// watched costs its tabs' connections, not a goroutine and a stack of its own as well.
// Whatever reaches it next starts the loop again and is handled: a hello, a send, a
// timer, an unsubscribe (and a write's outcome: TestQueueNotifiesAfterItSignals).
func TestQuietActorGivesItsGoroutineBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	parked := make(chan struct{}, 1000)
	m := startMetered(t, storetest.New(t), script.PerRun(func(req conversation.Request) []script.Step {
		return []script.Step{script.Text("answer to " + req.Content)}
	}), func(c *conversation.Config) {
		c.QuietRelease = time.Minute
		c.IdleTimeout = time.Hour
		conversation.OnParked(c, func() { parked <- struct{}{} })
	})
	a, clock := m.Actor, m.clock
	// awaitParked waits until the loop parked and nothing has started it again since.
	awaitParked := func() {
		t.Helper()
		for {
			select {
			case <-parked:
			case <-ctx.Done():
				t.Fatal("the actor's loop did not give its goroutine back")
			}
			if a.Parked() {
				return
			}
		}
	}

	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	tab.AwaitCatchUp(t, 1)
	awaitParked()

	// A send starts it again; the run streams to the tab, and once it ended and its
	// end is stored the loop parks again.
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "hello"})
	require.NoError(t, err)
	tab.Await(t, convtest.Terminal)
	msgs := tab.Messages()
	require.Len(t, msgs, 2)
	require.Equal(t, "answer to hello", msgs[1].Content)
	awaitParked()

	// The quiet release's timer starts it again when it fires.
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Minute)
	require.Eventually(t, func() bool { return m.value(t, "chatd_conversation_memory_released_total") == 1 }, 10*time.Second, 5*time.Millisecond)
	awaitParked()

	// An unsubscribe starts it again: with no subscriber left, the idle timer is armed.
	a.Unsubscribe(ctx, tab)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	awaitParked()
}
