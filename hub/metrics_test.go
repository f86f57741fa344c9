package hub_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/hub"
	"github.com/chatd/chatd/store/storetest"
)

// chatd_actors_live follows the actors in memory: started by a hello, gone when evicted
// and at shutdown.
func TestMetricsCountLiveActors(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	clock := clockwork.NewFakeClock()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	h, err := hub.New(conversation.Config{
		Store:       storetest.New(t),
		Agent:       script.New(),
		Clock:       clock,
		Logger:      log,
		IdleTimeout: idleTimeout,
	}, log, hub.WithMetrics(hub.NewMetrics(reg)))
	require.NoError(t, err)
	live := func() float64 {
		return gauge(t, reg, "chatd_actors_live")
	}
	require.Zero(t, live())

	ctx := testCtx(t)
	s1, s2 := newSub(), newSub()
	a1, _, err := h.Hello(ctx, uuid.New(), hello(s1))
	require.NoError(t, err)
	a2, _, err := h.Hello(ctx, uuid.New(), hello(s2))
	require.NoError(t, err)
	require.EqualValues(t, 2, live())

	// Only a1 is idle once both have handled everything before: the idle timer an actor
	// arms when it starts is disarmed after the step that answers its first hello.
	a1.Unsubscribe(ctx, s1)
	roundTrip(ctx, t, a1)
	roundTrip(ctx, t, a2)
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(idleTimeout)
	waitDone(ctx, t, a1)
	require.EqualValues(t, 1, live(), "the evicted actor is no longer counted")

	sctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, h.Shutdown(sctx))
	require.Zero(t, live())
}

// gauge returns the value of the unlabelled gauge name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			require.Len(t, f.GetMetric(), 1)
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}
