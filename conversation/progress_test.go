package conversation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

const progressWindow = time.Second

// startProgress starts an actor with the stepper agent, a fake clock and the progress
// store window, and subscribes n tabs.
func startProgress(t *testing.T, st conversation.Store, agent conversation.Agent, n int) (*clockwork.FakeClock, *conversation.Actor, []*convtest.Recorder) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	a := conversation.Start(conversation.Config{
		Store:                 st,
		Agent:                 agent,
		Clock:                 clock,
		Logger:                zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		ProgressStoreInterval: progressWindow,
	}, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	var tabs []*convtest.Recorder
	for range n {
		s := convtest.New()
		_, err := a.Hello(testCtx(t), conversation.HelloRequest{Create: true, Subscriber: s})
		require.NoError(t, err)
		s.AwaitCatchUp(t, 1)
		tabs = append(tabs, s)
	}
	return clock, a, tabs
}

func progressStep(step, of int, label string) func(context.Context, conversation.Emitter) error {
	return func(_ context.Context, out conversation.Emitter) error { return out.Progress(step, of, label) }
}

// progressEvents are the progress of the run.status events s received, in order.
func progressEvents(s *convtest.Recorder) []*chat.Progress {
	var out []*chat.Progress
	for _, ev := range s.Events() {
		if ev.Type == conversation.EventRunStatus {
			out = append(out, ev.Run.Progress)
		}
	}
	return out
}

func storedProgress(t *testing.T, st *store.Store, a *conversation.Actor, runID uuid.UUID) *chat.Progress {
	t.Helper()
	require.NoError(t, a.Flush(testCtx(t)))
	r, err := st.RunGet(testCtx(t), runID)
	require.NoError(t, err)
	return r.Progress
}

// Progress reaches every tab at once, as a run.status; a late tab's snapshot has it. It
// is stored write-behind and coalesced: the first report at once, the reports within the
// window by the last of them when it ends, and the latest with the run's end, which the
// conversation list then shows.
func TestProgressReachesTabsAndIsStoredCoalesced(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := newStepper()
	clock, a, tabs := startProgress(t, st, agent, 2)
	res, err := a.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "read 7 pages"})
	require.NoError(t, err)
	p := func(step int) *chat.Progress { return &chat.Progress{Step: step, Of: 7, Label: "pages"} }

	require.NoError(t, agent.play(t, a, progressStep(1, 7, "pages")))
	for _, s := range tabs {
		require.Equal(t, []*chat.Progress{p(1)}, progressEvents(s))
	}
	require.Equal(t, p(1), storedProgress(t, st, a, res.RunID), "the first report is stored at once")
	waitTimers(t, clock, 1) // the window: the actor's only timer while tabs watch its run

	require.NoError(t, agent.play(t, a, progressStep(2, 7, "pages")))
	require.NoError(t, agent.play(t, a, progressStep(3, 7, "pages")))
	require.NoError(t, agent.play(t, a, progressStep(3, 7, "pages"))) // no change: nothing
	for _, s := range tabs {
		require.Equal(t, []*chat.Progress{p(1), p(2), p(3)}, progressEvents(s), "every report, live")
	}
	require.Equal(t, p(1), storedProgress(t, st, a, res.RunID), "the window's reports wait for its end")

	clock.Advance(progressWindow)
	require.Eventually(t, func() bool {
		return *storedProgress(t, st, a, res.RunID) == *p(3)
	}, 10*time.Second, 5*time.Millisecond, "the window's last report is stored when it ends")

	// A tab that comes late gets it in its snapshot.
	late := convtest.New()
	_, err = a.Hello(testCtx(t), conversation.HelloRequest{Subscriber: late, Create: true})
	require.NoError(t, err)
	snap := late.AwaitCatchUp(t, 1).Snapshot
	require.NotNil(t, snap.ActiveRun)
	require.Equal(t, p(3), snap.ActiveRun.Progress)

	// A report in the next window is stored with the run's end at the latest.
	require.NoError(t, agent.play(t, a, progressStep(4, 7, "pages")))
	close(agent.steps)
	for _, s := range append(tabs, late) {
		end := s.Await(t, convtest.Terminal)
		require.EqualValues(t, "chat.done", end.Type)
		require.Equal(t, p(4), end.Run.Progress, "the ended run keeps its last progress")
	}
	require.Equal(t, p(4), storedProgress(t, st, a, res.RunID))
	sum, err := st.SessionSummary(testCtx(t), "", a.SessionID())
	require.NoError(t, err)
	require.Equal(t, p(4), sum.Progress, "the conversation list shows the latest run's progress")
}

// Bad reports are refused with a clear error and change nothing; the run goes on. A
// label of 200 characters (not bytes) is fine, and (0, 0, "") clears the progress.
func TestProgressRefusesBadValues(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := newStepper()
	_, a, tabs := startProgress(t, st, agent, 1)
	res, err := a.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s := tabs[0]

	for _, bad := range []struct {
		step, of int
		label    string
		want     string
	}{
		{1, 0, "", "of is 0"},
		{0, -3, "", "of is -3"},
		{1, chat.MaxProgressSteps + 1, "", "of is 1000001"},
		{-1, 7, "", "step is -1"},
		{8, 7, "", "step is 8"},
		{0, 0, "x", "of is 0"},
		{1, 7, "bad \xff label", "not valid UTF-8"},
		{1, 7, strings.Repeat("é", chat.MaxProgressLabel+1), "201 characters"},
		{1, 7, "two\nlines", "control character"},
	} {
		var err error
		require.NoError(t, agent.play(t, a, func(_ context.Context, out conversation.Emitter) error {
			err = out.Progress(bad.step, bad.of, bad.label)
			return nil // the agent goes on
		}))
		var ce *conversation.Error
		require.ErrorAs(t, err, &ce, "%+v", bad)
		require.Equal(t, conversation.CodeBadRequest, ce.Code)
		require.Contains(t, ce.Message, bad.want)
	}
	require.Empty(t, progressEvents(s), "a refused report publishes nothing")

	long := strings.Repeat("é", chat.MaxProgressLabel)
	require.NoError(t, agent.play(t, a, progressStep(7, 7, long)))
	require.NoError(t, agent.play(t, a, progressStep(0, 1, "")))
	require.NoError(t, agent.play(t, a, progressStep(0, 0, "")))
	require.Equal(t, []*chat.Progress{{Step: 7, Of: 7, Label: long}, {Step: 0, Of: 1}, nil}, progressEvents(s))
	close(agent.steps)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type, "the run went on")
	require.Nil(t, storedProgress(t, st, a, res.RunID), "cleared")
}

// A clean stop (a rolling restart: SuspendOnStop) stores the latest report even within
// the window, and the actor that takes the session up next shows the continued run with
// it.
func TestProgressIsStoredAtACleanStopAndContinued(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	clock := clockwork.NewFakeClock()
	cfg := func(agent conversation.Agent) conversation.Config {
		return conversation.Config{
			Store: st, Agent: agent, Clock: clock, SuspendOnStop: true, ProgressStoreInterval: progressWindow,
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		}
	}
	agent := newStepper()
	first := conversation.Start(cfg(agent), session, nil)
	s := convtest.New()
	_, err := first.Hello(testCtx(t), conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	res, err := first.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	for step := 1; step <= 3; step++ {
		require.NoError(t, agent.play(t, first, progressStep(step, 7, "pages")))
	}
	require.Equal(t, &chat.Progress{Step: 1, Of: 7, Label: "pages"}, storedProgress(t, st, first, res.RunID), "2 and 3 wait for the window")

	require.NoError(t, first.Stop(testCtx(t)))
	require.NoError(t, first.Wait(testCtx(t)))
	run, err := st.RunGet(testCtx(t), res.RunID)
	require.NoError(t, err)
	require.Equal(t, chat.RunRunning, run.Status, "suspended for the next process")
	require.Equal(t, &chat.Progress{Step: 3, Of: 7, Label: "pages"}, run.Progress, "the stop stored the last report")

	next := &checkpointAgent{steps: func(ctx context.Context, _ conversation.Request, _ conversation.Emitter) error {
		<-ctx.Done() // it goes on; the test only looks
		return ctx.Err()
	}}
	second := conversation.Start(cfg(next), session, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, second.Stop(ctx))
		require.NoError(t, second.Wait(ctx))
	})
	late := convtest.New()
	_, err = second.Hello(testCtx(t), conversation.HelloRequest{Subscriber: late})
	require.NoError(t, err)
	snap := late.AwaitCatchUp(t, 1).Snapshot
	require.NotNil(t, snap.ActiveRun, "the suspended run is continued")
	require.Equal(t, res.RunID, snap.ActiveRun.ID)
	require.Equal(t, &chat.Progress{Step: 3, Of: 7, Label: "pages"}, snap.ActiveRun.Progress)
}
