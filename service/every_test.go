package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/service"
)

// Every runs its function at once, then at each tick, and stops when told, ending the
// context of a pass under way.
func TestEveryRunsAtOnceThenEachTick(t *testing.T) {
	clock := clockwork.NewFakeClock()
	passes := make(chan int)
	n := 0
	var l service.Loop
	require.NoError(t, l.Start(func(stop <-chan struct{}) {
		service.Every(stop, clock, time.Minute, func(ctx context.Context) {
			n++
			passes <- n
			if n == 3 {
				<-ctx.Done() // a pass under way when the stop comes
			}
		})
	}))
	require.Equal(t, 1, <-passes, "at once")
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Minute)
	require.Equal(t, 2, <-passes, "at the tick")
	require.NoError(t, clock.BlockUntilContext(t.Context(), 1))
	clock.Advance(time.Minute)
	require.Equal(t, 3, <-passes)
	require.NoError(t, l.Stop(t.Context()), "the stop ends the pass under way")
}
