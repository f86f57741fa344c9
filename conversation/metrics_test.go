package conversation_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// metered is an actor counting into a registry of its own.
type metered struct {
	*conversation.Actor
	reg   *prometheus.Registry
	clock *clockwork.FakeClock
}

func startMetered(t *testing.T, st conversation.Store, agent conversation.Agent, edit func(*conversation.Config)) *metered {
	t.Helper()
	reg := prometheus.NewRegistry()
	clock := clockwork.NewFakeClock()
	cfg := conversation.Config{
		Store:   st,
		Agent:   agent,
		Clock:   clock,
		Logger:  zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Metrics: conversation.NewMetrics(reg),
	}
	if edit != nil {
		edit(&cfg)
	}
	a := conversation.Start(cfg, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	return &metered{Actor: a, reg: reg, clock: clock}
}

// value returns the value of the series name{labels} (a histogram's count), 0 when it
// does not exist.
func (m *metered) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return gathered(t, m.reg, name, labels...)
}

// active returns chatd_runs_active by status.
func (m *metered) active(t *testing.T) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range []string{"running", "awaiting_approval", "paused"} {
		out[s] = m.value(t, "chatd_runs_active", "status", s)
	}
	return out
}

func gathered(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

var noneActive = map[string]float64{"running": 0, "awaiting_approval": 0, "paused": 0}

// A run is counted under each status it passes through, and under none once it is
// cancelled; its duration is recorded under the status it ended with. Events and
// catch-ups are counted as they happen.
func TestMetricsFollowARun(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	a := startMetered(t, storetest.New(t), script.New(
		script.Text("hello"),
		gate.Wait(),
		script.AwaitOnly("c1", "shell", `{}`, nil),
		gate.Wait(),
		script.Paused(),
		script.Hang(),
	), nil)
	ctx := testCtx(t)
	s := convtest.New()
	hello, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	require.False(t, hello.Resumed)
	require.EqualValues(t, 1, a.value(t, "chatd_catchups_total", "kind", "snapshot"))
	require.EqualValues(t, noneActive, a.active(t))

	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	require.Equal(t, map[string]float64{"running": 1, "awaiting_approval": 0, "paused": 0}, a.active(t))

	require.NoError(t, gate.Pass(ctx))
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	require.Equal(t, map[string]float64{"running": 0, "awaiting_approval": 1, "paused": 0}, a.active(t))

	require.NoError(t, gate.Pass(ctx))
	st := s.Await(t, func(f *conversation.Event) bool { return f.Type == "run.status" && f.Run.Status == "paused" })
	require.Equal(t, map[string]float64{"running": 0, "awaiting_approval": 0, "paused": 1}, a.active(t))

	// A second subscriber that saw the first events is caught up from the ring.
	back := convtest.New()
	res, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: back, Epoch: hello.Epoch, LastSeq: 2})
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.EqualValues(t, 1, a.value(t, "chatd_catchups_total", "kind", "replay"))
	require.EqualValues(t, 1, a.value(t, "chatd_catchups_total", "kind", "snapshot"))

	a.clock.Advance(90 * time.Second)
	_, err = a.Cancel(ctx, uuid.Nil)
	require.NoError(t, err)
	end := s.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.cancelled", end.Type)
	require.Greater(t, end.Seq, st.Seq)
	require.EqualValues(t, noneActive, a.active(t))
	require.EqualValues(t, 1, a.value(t, "chatd_run_duration_seconds", "status", "cancelled"))
	require.EqualValues(t, 0, a.value(t, "chatd_run_duration_seconds", "status", "done"))
	require.InDelta(t, 90, runDurationSum(t, a.reg, "cancelled"), 0.01, "measured on the actor's clock")
	require.EqualValues(t, end.Seq, a.value(t, "chatd_events_published_total"), "one count per seq")
	require.EqualValues(t, 0, a.value(t, "chatd_ring_evictions_total"))
}

func runDurationSum(t *testing.T, reg *prometheus.Registry, status string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "chatd_run_duration_seconds" {
			continue
		}
		for _, s := range f.GetMetric() {
			if s.GetLabel()[0].GetValue() == status {
				return s.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0
}

// Runs that fail (the agent's error, a write that fails, a crash) and runs a shutdown
// interrupts leave no active count behind.
func TestMetricsRunsActiveReturnToZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		steps  []script.Step
		fault  string // a store method that fails
		stop   bool   // stop the actor while the run waits
		status string
	}{
		{name: "agent error", steps: []script.Step{script.Text("a"), script.Fail("boom", "it broke")}, status: "error"},
		{name: "agent panic", steps: []script.Step{script.Text("a"), script.Panic("oops")}, status: "error"},
		{name: "write fails", steps: []script.Step{script.Text("a"), script.Tool("c1", "t", `{}`, "out"), script.Hang()}, fault: "MessageInsert", status: "error"},
		{name: "waiting for approval when stopped", steps: []script.Step{script.AwaitOnly("c1", "t", `{}`, nil), script.Hang()}, stop: true, status: "interrupted"},
		{name: "streaming when stopped", steps: []script.Step{script.Text("a"), script.Hang()}, stop: true, status: "interrupted"},
		{name: "done", steps: []script.Step{script.Text("a")}, status: "done"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t) // its own: a parallel subtest may wait long for its turn
			st := newFaultStore(t)
			a := startMetered(t, st, script.New(tc.steps...), nil)
			t.Cleanup(st.clear) // before the actor stops: see faultSetup
			s := convtest.New()
			_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
			require.NoError(t, err)
			if tc.fault != "" {
				st.set(tc.fault, failBefore, -1)
			}
			_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
			require.NoError(t, err)
			if tc.stop {
				// The run's status as of the event awaited is counted before it is published.
				f := s.Await(t, func(f *conversation.Event) bool {
					return f.Type == "chat.delta" || f.Type == "run.status" && f.Run.Status == "awaiting_approval"
				})
				waiting := "running"
				if f.Type == "run.status" {
					waiting = "awaiting_approval"
				}
				require.EqualValues(t, 1, a.value(t, "chatd_runs_active", "status", waiting))
				require.NoError(t, a.Stop(ctx))
			}
			end := s.Await(t, convtest.Terminal)
			require.EqualValues(t, tc.status, end.Run.Status, "%+v", end.Run.Error)
			require.EqualValues(t, noneActive, a.active(t))
			require.EqualValues(t, 1, a.value(t, "chatd_run_duration_seconds", "status", tc.status))
		})
	}
}

// Events pushed out of the ring are counted: published = held in the ring + evicted.
func TestMetricsCountRingEvictions(t *testing.T) {
	t.Parallel()
	const ringEvents = 8
	a := startMetered(t, storetest.New(t), script.New(script.Words(30)), func(c *conversation.Config) {
		c.RingEvents = ringEvents
	})
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	end := s.Await(t, convtest.Terminal)
	// An event goes into the ring, and what it evicts is counted, after it has been
	// delivered: the actor may not have done so for the terminal event yet. It has once
	// it answers the next intent.
	roundTrip(t, a.Actor)
	require.EqualValues(t, end.Seq, a.value(t, "chatd_events_published_total"))
	require.EqualValues(t, end.Seq-ringEvents, a.value(t, "chatd_ring_evictions_total"))
}

// An actor without Metrics counts into metrics nobody exposes.
func TestNilMetricsWork(t *testing.T) {
	t.Parallel()
	a := startActor(t, storetest.New(t), script.New(script.Text("a")))
	s := convtest.New()
	ctx := testCtx(t)
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
}
