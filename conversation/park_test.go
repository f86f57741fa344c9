package conversation_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// An actor with nothing to do gives its loop's goroutine back: a session that is only
// watched costs its tabs' connections, not a goroutine and a stack of its own as well.
// Whatever reaches it next starts the loop again and is handled: a hello, a send, a
// timer, a write's outcome, an unsubscribe.
func TestQuietActorGivesItsGoroutineBack(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	parked := make(chan struct{}, 1000)
	clock := clockwork.NewFakeClock()
	reg := prometheus.NewRegistry()
	cfg := conversation.Config{
		Store: storetest.New(t),
		Agent: script.PerRun(func(req conversation.Request) []script.Step {
			return []script.Step{script.Text("answer to " + req.Content)}
		}),
		Clock:        clock,
		Logger:       zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Metrics:      conversation.NewMetrics(reg),
		QuietRelease: time.Minute,
		IdleTimeout:  time.Hour,
	}
	conversation.OnParked(&cfg, func() { parked <- struct{}{} })
	a := conversation.Start(cfg, uuid.New(), nil)
	m := &metered{Actor: a, reg: reg, clock: clock}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Stop(ctx); !errors.Is(err, conversation.ErrStopped) {
			require.NoError(t, err)
		}
		require.NoError(t, a.Wait(ctx))
	})
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

	// An unsubscribe starts it again: with no subscriber left, the idle timer is armed,
	// and evicts the actor when it fires.
	a.Unsubscribe(ctx, tab)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(time.Hour)
	select {
	case <-a.Done():
	case <-ctx.Done():
		t.Fatal("the idle actor was not evicted")
	}
	require.NoError(t, a.Wait(ctx))
	require.False(t, a.Parked(), "a stopped actor's loop is not parked: nothing starts it again")
}
