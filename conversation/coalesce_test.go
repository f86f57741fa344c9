package conversation_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

const window = 25 * time.Millisecond

// startCoalescing starts an actor that coalesces deltas for window on a fake clock, with
// one subscriber.
func startCoalescing(t *testing.T, st conversation.Store, agent conversation.Agent) (*clockwork.FakeClock, *conversation.Actor, *convtest.Recorder) {
	t.Helper()
	return startCoalescingWith(t, conversation.Config{Store: st, Agent: agent, CoalesceDeltas: window})
}

// startCoalescingWith is startCoalescing with cfg's coalescing, on a fake clock.
func startCoalescingWith(t *testing.T, cfg conversation.Config) (*clockwork.FakeClock, *conversation.Actor, *convtest.Recorder) {
	t.Helper()
	clock := clockwork.NewFakeClock()
	cfg.Clock = clock
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	a := conversation.Start(cfg, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	s := convtest.New()
	_, err := a.Hello(context.Background(), conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	return clock, a, s
}

// stepper is an agent the test plays one step at a time, so it knows which pieces the
// actor holds when it moves the clock. Closing steps ends the run.
type stepper struct {
	steps chan script.Step
	ran   chan error
}

func newStepper() *stepper {
	return &stepper{steps: make(chan script.Step), ran: make(chan error, 1)}
}

func (p *stepper) Run(ctx context.Context, _ conversation.Request, out conversation.Emitter) error {
	for {
		select {
		case step, ok := <-p.steps:
			if !ok {
				return nil
			}
			err := step(ctx, out)
			p.ran <- err
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// play runs step in the agent and returns once the actor has handled what it emitted.
func (p *stepper) play(t *testing.T, a *conversation.Actor, step script.Step) error {
	t.Helper()
	ctx := testCtx(t)
	select {
	case p.steps <- step:
	case <-ctx.Done():
		t.Fatal("the agent did not take the step")
	}
	var err error
	select {
	case err = <-p.ran:
	case <-ctx.Done():
		t.Fatal("the agent did not finish the step")
	}
	roundTrip(t, a)
	return err
}

// event is a frame reduced to what the ordering tests compare.
type event struct {
	typ, text string
}

func events(frames []*conversation.Event) []event {
	var out []event
	for _, f := range frames {
		out = append(out, event{typ: string(f.Type), text: f.Text})
	}
	return out
}

// awaitDeltas waits for the next n deltas s receives and returns their texts.
func awaitDeltas(t *testing.T, s *convtest.Recorder, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ev := s.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventDelta })
		out = append(out, ev.Text)
	}
	return out
}

func deltas(s *convtest.Recorder) []string {
	var out []string
	for _, e := range events(s.Events()) {
		if e.typ == "chat.delta" {
			out = append(out, e.text)
		}
	}
	return out
}

// requireDeltasAreStored checks that every assistant message's stored content is the
// concatenation of the deltas s received for it, and that s holds what the database
// holds. s must have seen the session from its first event.
func requireDeltasAreStored(t *testing.T, st *store.Store, a *conversation.Actor, s *convtest.Recorder) {
	t.Helper()
	require.NoError(t, a.Flush(context.Background()))
	joined := map[uuid.UUID]string{}
	for _, f := range s.Events() {
		if f.Type == "chat.delta" {
			joined[f.MessageID] += f.Text
		}
	}
	db := stored(t, st, a.SessionID())
	for _, m := range db {
		if m.Role == "assistant" {
			require.Equal(t, m.Content, joined[m.ID], "message %d", m.Position)
		}
	}
	require.Empty(t, convtest.Diff(db, s.Messages()))
}

func TestCoalesceMergesPiecesWithinTheWindow(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := newStepper()
	clock, a, s := startCoalescing(t, st, agent)
	_, err := a.Send(context.Background(), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)

	require.NoError(t, agent.play(t, a, script.Text("Hel", "lo", ", ")))
	require.Empty(t, deltas(s), "held for the window")
	waitTimers(t, clock, 1) // the window's timer, the actor's only one
	clock.Advance(window - time.Nanosecond)
	roundTrip(t, a)
	require.Empty(t, deltas(s), "the window has not passed")
	clock.Advance(time.Nanosecond)
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	require.Equal(t, []string{"Hello, "}, deltas(s))

	// A piece after the window starts the next one, which runs from that piece: later
	// pieces do not extend it.
	require.NoError(t, agent.play(t, a, script.Text("wor")))
	clock.Advance(window / 2)
	require.NoError(t, agent.play(t, a, script.Text("ld")))
	require.Equal(t, []string{"Hello, "}, deltas(s))
	clock.Advance(window / 2)
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" && f.Text == "world" })

	// The end of the run publishes what is held without waiting for the window.
	require.NoError(t, agent.play(t, a, script.Text("!")))
	close(agent.steps)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	require.Equal(t, []event{
		{typ: "chat.started"},
		{typ: "assistant.segment.started"},
		{typ: "chat.delta", text: "Hello, "},
		{typ: "chat.delta", text: "world"},
		{typ: "chat.delta", text: "!"},
		{typ: "assistant.segment.ended"},
		{typ: "chat.done"},
	}, events(s.Events()))
	requireDeltasAreStored(t, st, a, s)

	// Nothing is published once the run is over, however long the clock goes on.
	clock.Advance(time.Hour)
	roundTrip(t, a)
	require.Len(t, s.CatchUps(), 1, "the snapshot")
	require.Len(t, s.Events(), 7, "the run's events")
}

func TestCoalesceFlushesAtTheSizeBound(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := newStepper()
	clock, a, s := startCoalescing(t, st, agent)
	_, err := a.Send(context.Background(), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	piece := func(c string, n int) string { return strings.Repeat(c, n) }
	const third = conversation.MaxCoalescedDelta * 3 / 8

	// Two pieces fit; the third would pass the bound, so the two go out first.
	require.NoError(t, agent.play(t, a, script.Text(piece("a", third), piece("b", third))))
	require.Empty(t, deltas(s))
	require.NoError(t, agent.play(t, a, script.Text(piece("c", third))))
	require.Equal(t, []string{piece("a", third) + piece("b", third)}, deltas(s))
	clock.Advance(window)
	s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" && strings.HasPrefix(f.Text, "c") })

	// Text that reaches the bound goes out at once, a piece larger than it as it came.
	require.NoError(t, agent.play(t, a, script.Text(piece("d", conversation.MaxCoalescedDelta-1), "e")))
	require.NoError(t, agent.play(t, a, script.Text(piece("f", 2*conversation.MaxCoalescedDelta))))
	require.Equal(t, []string{
		piece("a", third) + piece("b", third),
		piece("c", third),
		piece("d", conversation.MaxCoalescedDelta-1) + "e",
		piece("f", 2*conversation.MaxCoalescedDelta),
	}, deltas(s))

	close(agent.steps)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	requireDeltasAreStored(t, st, a, s)
}

// Every other event of the run publishes the held text first: the clock never moves
// here, so each delta below was forced out by the event after it.
func TestCoalescedTextGoesOutBeforeEveryOtherEvent(t *testing.T) {
	t.Parallel()
	usage := func(_ context.Context, out conversation.Emitter) error {
		return out.Usage(conversation.Usage{InputTokens: 10, OutputTokens: 2})
	}
	reasoning := func(text string) script.Step {
		return func(_ context.Context, out conversation.Emitter) error { return out.Reasoning(text) }
	}
	cases := []struct {
		name  string
		steps []script.Step
		want  []event
	}{{
		name: "segment ends, tools, usage and kind switches",
		steps: []script.Step{
			script.Reasoning("", "thinking ", "hard"), // closed by EndReasoning
			script.Text("a", "b"),
			usage,
			script.Text("c"),
			script.ToolStart("c1", "lookup", `{}`),
			script.Text("d"), // a new segment while the tool runs
			script.ToolOutput("c1", "out"),
			script.Text("e"),
			script.ToolEnd("c1", ""),
			reasoning("r"),   // text to reasoning
			script.Text("f"), // reasoning to text
		},
		want: []event{
			{typ: "chat.started"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "thinking hard"},
			{typ: "assistant.segment.ended"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "ab"},
			{typ: "run.status"},
			{typ: "chat.delta", text: "c"},
			{typ: "assistant.segment.ended"},
			{typ: "tool.start"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "d"},
			{typ: "tool.output", text: "out"},
			{typ: "chat.delta", text: "e"},
			{typ: "tool.end"},
			{typ: "assistant.segment.ended"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "r"},
			{typ: "assistant.segment.ended"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "f"},
			{typ: "assistant.segment.ended"},
			{typ: "chat.done"},
		},
	}, {
		name:  "the agent fails right after a piece",
		steps: []script.Step{script.Text("x", "y"), script.Fail("model_error", "boom")},
		want: []event{
			{typ: "chat.started"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "xy"},
			{typ: "assistant.segment.ended"},
			{typ: "chat.error"},
		},
	}, {
		name:  "an approval right after a piece",
		steps: []script.Step{script.Text("may I"), script.AwaitOnly("c1", "shell", `{}`, nil)},
		want: []event{
			{typ: "chat.started"},
			{typ: "assistant.segment.started"},
			{typ: "chat.delta", text: "may I"},
			{typ: "assistant.segment.ended"},
			{typ: "tool.start"},
			{typ: "run.status"},
			{typ: "tool.end"}, // the run ended before the call did
			{typ: "chat.done"},
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := storetest.New(t)
			_, a, s := startCoalescing(t, st, script.New(tc.steps...))
			_, err := a.Send(context.Background(), conversation.SendRequest{RequestID: "r1", Content: "go"})
			require.NoError(t, err)
			s.Await(t, convtest.Terminal) // also fails on a seq gap
			require.Equal(t, tc.want, events(s.Events()))
			requireDeltasAreStored(t, st, a, s)
		})
	}
}

// Cancelling, or stopping the server, in the middle of a window stores and shows the
// held text, and nothing is published after the run's end.
func TestCoalescedTextSurvivesTheEndOfTheRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		end    func(a *conversation.Actor) error
		status string
		last   string
	}{{
		name: "cancel",
		end: func(a *conversation.Actor) error {
			_, err := a.Cancel(context.Background(), uuid.Nil)
			return err
		},
		status: "cancelled",
		last:   "chat.cancelled",
	}, {
		name:   "shutdown",
		end:    func(a *conversation.Actor) error { return a.Stop(context.Background()) },
		status: "interrupted",
		last:   "chat.error",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := storetest.New(t)
			agent := newStepper()
			clock, a, s := startCoalescing(t, st, agent)
			_, err := a.Send(context.Background(), conversation.SendRequest{RequestID: "r1", Content: "go"})
			require.NoError(t, err)
			require.NoError(t, agent.play(t, a, script.Text("half", "way")))
			require.Empty(t, deltas(s))

			require.NoError(t, tc.end(a))
			require.EqualValues(t, tc.last, s.Await(t, convtest.Terminal).Type)
			require.Equal(t, []event{
				{typ: "chat.started"},
				{typ: "assistant.segment.started"},
				{typ: "chat.delta", text: "halfway"},
				{typ: "assistant.segment.ended"},
				{typ: tc.last},
			}, events(s.Events()))
			msgs := s.Messages()
			require.Equal(t, "halfway", msgs[1].Content)
			require.EqualValues(t, tc.status, msgs[1].Status)
			requireDeltasAreStored(t, st, a, s)

			// Nothing is published after the run's end, however long the clock goes on
			// (a stopped actor has no timer at all).
			if tc.name == "cancel" {
				clock.Advance(time.Hour)
				roundTrip(t, a)
			}
			require.Len(t, events(s.Events()), 5)
		})
	}
}

// A hello in the middle of a window publishes the held text first, so the newcomer's
// snapshot has all of it at the seq of that delta, and what follows continues it.
// History shows only text that was published, like a snapshot at the current seq.
func TestHelloMidWindowGetsTheHeldText(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := newStepper()
	clock, a, s := startCoalescing(t, st, agent)
	ctx := context.Background()
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.NoError(t, agent.play(t, a, script.Text("hello ", "wor")))
	require.Empty(t, deltas(s))

	late := convtest.New()
	res, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: late})
	require.NoError(t, err)
	require.False(t, res.Resumed)
	snap := late.AwaitCatchUp(t, 1).Snapshot
	require.Equal(t, "hello wor", snap.Messages[1].Content)
	require.Equal(t, []string{"hello wor"}, deltas(s))
	flushed := s.Events()[len(s.Events())-1]
	require.EqualValues(t, "chat.delta", flushed.Type)
	require.Equal(t, flushed.Seq, snap.LastSeq, "the snapshot is as of the delta that carried the held text")

	require.NoError(t, agent.play(t, a, script.Text("ld")))
	page, err := a.History(ctx, 0, 10)
	require.NoError(t, err)
	require.Equal(t, "hello wor", page.Messages[1].Content, "history has no unpublished text")
	clock.Advance(window)
	late.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" })
	require.Equal(t, "hello world", late.Messages()[1].Content)

	require.NoError(t, agent.play(t, a, script.Text("!")))
	close(agent.steps)
	s.Await(t, convtest.Terminal)
	late.Await(t, convtest.Terminal)
	require.Equal(t, []string{"hello wor", "ld", "!"}, deltas(s))
	requireDeltasAreStored(t, st, a, s)
	require.Empty(t, convtest.Diff(s.Messages(), late.Messages()))
}

// A segment whose closing write fails after held text: the delta still goes out before
// the segment's end, and the state kept for the retry has the held text.
func TestCoalescedTextWithAFailingWrite(t *testing.T) {
	t.Parallel()
	st := newFaultStore(t)
	agent := newStepper()
	clock, a, s := startCoalescing(t, st, agent)
	ctx := context.Background()
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	require.NoError(t, agent.play(t, a, script.Text("kept ", "anyway")))

	// The segment's closing write is stored behind: the tool call may start before its
	// failure ends the run (then the call ends with it).
	st.set("MessageUpdate", failBefore, -1)
	if err := agent.play(t, a, script.ToolStart("c1", "lookup", `{}`)); err != nil {
		require.ErrorIs(t, err, conversation.ErrRunEnded)
	}
	end := s.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.error", end.Type)
	require.Equal(t, "storage", end.Run.Error.Code)
	evs := events(s.Events())
	require.Equal(t, []event{
		{typ: "chat.started"},
		{typ: "assistant.segment.started"},
		{typ: "chat.delta", text: "kept anyway"},
		{typ: "assistant.segment.ended"},
	}, evs[:4])
	require.Equal(t, event{typ: "chat.error"}, evs[len(evs)-1])
	require.Equal(t, "kept anyway", snapshotOf(t, a)[1].Content)

	// The retry stores it: once the actor is idle (its eviction timer armed), it has.
	a.Unsubscribe(ctx, s)
	waitTimers(t, clock, 1) // the retry: an actor with a write to retry is not idle
	st.clear()
	clock.Advance(time.Second)
	waitTimers(t, clock, 1) // the eviction timer: the retry has stored the write
	requireDeltasAreStored(t, st.Store, a, s)
}

func TestValidateRejectsNegativeCoalescing(t *testing.T) {
	t.Parallel()
	err := conversation.Config{Store: &store.Store{}, Agent: script.New(), CoalesceDeltas: -time.Millisecond}.Validate()
	require.ErrorContains(t, err, "CoalesceDeltas")
}

// firstThen answers the first run with "a1" and hands every later run to then.
type firstThen struct {
	then conversation.Agent
	runs int
}

func (f *firstThen) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	f.runs++
	if f.runs == 1 {
		return out.Text("a1")
	}
	return f.then.Run(ctx, req, out)
}

// Switching branches while text is held back for coalescing loses none of it: the held
// text goes out before branch.selected, which carries it, so a tab that selects the
// streaming branch holds every character.
func TestBranchSelectedCarriesHeldText(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	p := newStepper()
	_, a, s := startCoalescing(t, st, &firstThen{then: p})
	ctx := testCtx(t)
	first, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "q1"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	old := s.Messages()[1]

	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: first.RunID, RequestID: "r2", Retry: true, Regenerate: true})
	require.NoError(t, err)
	require.NoError(t, p.play(t, a, script.Text("x"))) // held: the clock stands still
	started := s.Await(t, func(ev *conversation.Event) bool { return ev.Type == conversation.EventSegmentStarted })
	require.NoError(t, a.SelectBranch(ctx, old.ID))
	require.Equal(t, []string{"q1", "a1"}, contentsOf(s.Messages()))
	require.NoError(t, p.play(t, a, script.Text("y"))) // held again, off the path shown
	require.NoError(t, a.SelectBranch(ctx, started.Message.ID))
	require.Equal(t, []string{"q1", "xy"}, contentsOf(s.Messages()), "every character, in branch.selected")
	close(p.steps)
	s.Await(t, func(ev *conversation.Event) bool { return ev.Terminal() && ev.RequestID == "r2" })
	require.NoError(t, a.Flush(ctx))
	require.Empty(t, convtest.Diff(stored(t, st, a.SessionID()), s.Messages()))
}

func contentsOf(ms []chat.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Content
	}
	return out
}

// stallingSubscriber wraps a recorder and blocks the actor in the delivery of the first
// delta until released: the actor is busy, as a loaded process's is.
type stallingSubscriber struct {
	*convtest.Recorder
	stalled chan struct{} // closed when the first delta is being delivered
	release chan struct{}
	once    bool
}

func (s *stallingSubscriber) Deliver(ev *conversation.Event) bool {
	if ev.Type == conversation.EventDelta && !s.once {
		s.once = true
		close(s.stalled)
		<-s.release
	}
	return s.Recorder.Deliver(ev)
}

// startBurst starts a session whose agent says "a", waits for burst, says "b", "c" and
// "d" at once (then closes sent), and says "e" and "f" one burst at a time; sub is the
// session's subscriber, coalesce its actor's CoalesceDeltas.
func startBurst(t *testing.T, coalesce time.Duration, sub conversation.Subscriber) (burst, sent chan struct{}) {
	t.Helper()
	st := storetest.New(t)
	burst, sent = make(chan struct{}), make(chan struct{})
	first := newFirstQueued()
	agent := conversation.AgentFunc(func(ctx context.Context, _ conversation.Request, out conversation.Emitter) error {
		if err := first.text(out, "a"); err != nil {
			return err
		}
		<-burst // the actor is stalled delivering "a"
		for _, p := range []string{"b", "c", "d"} {
			if err := out.Text(p); err != nil {
				return err
			}
		}
		close(sent)
		<-burst // released after the actor caught up
		for _, p := range []string{"e", "f"} {
			if err := out.Text(p); err != nil {
				return err
			}
			<-burst
		}
		return nil
	})
	first.queue(startRun(t, conversation.Config{Store: st, Agent: agent, CoalesceDeltas: coalesce}, sub))
	return burst, sent
}

// firstQueued has an agent's first text wait in the actor's inbox, to be handled by the
// actor's loop: the test holds the actor's turn while the agent emits it. (Text emitted
// while the actor is idle is otherwise handled on the agent's goroutine, which would
// then be the one stalled in a delivery, not the actor with the agent going on.)
type firstQueued struct{ started, emit, queued chan struct{} }

func newFirstQueued() *firstQueued {
	return &firstQueued{started: make(chan struct{}), emit: make(chan struct{}), queued: make(chan struct{})}
}

// text is the agent's side: it emits text once the test holds the turn.
func (f *firstQueued) text(out conversation.Emitter, text string) error {
	close(f.started)
	<-f.emit
	err := out.Text(text)
	close(f.queued)
	return err
}

// queue is the test's side.
func (f *firstQueued) queue(a *conversation.Actor) {
	<-f.started
	release := a.HoldTurn()
	close(f.emit)
	<-f.queued
	release()
}

// startRun starts an actor with cfg (a fake clock and a quiet logger added), stopped
// when the test ends, subscribes sub to a new session and sends it a message.
func startRun(t *testing.T, cfg conversation.Config, sub conversation.Subscriber) *conversation.Actor {
	t.Helper()
	cfg.Clock = clockwork.NewFakeClock()
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	a := conversation.Start(cfg, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	_, err := a.Hello(testCtx(t), conversation.HelloRequest{Create: true, Subscriber: sub})
	require.NoError(t, err)
	_, err = a.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	return a
}

// Adaptive coalescing adds no latency when the actor keeps up (each piece is published
// as it comes) and merges the pieces that queued up while it was busy into one delta.
func TestAdaptiveCoalescingMergesOnlyWhatQueued(t *testing.T) {
	t.Parallel()
	s := &stallingSubscriber{Recorder: convtest.New(), stalled: make(chan struct{}), release: make(chan struct{})}
	burst, sent := startBurst(t, conversation.CoalesceAdaptive, s)

	<-s.stalled // "a" went out at once, and the actor is stuck delivering it
	burst <- struct{}{}
	<-sent // b, c and d are queued behind it
	close(s.release)
	require.Equal(t, []string{"a", "bcd"}, awaitDeltas(t, s.Recorder, 2), "what queued while the actor was busy is one delta")
	burst <- struct{}{}
	require.Equal(t, []string{"e"}, awaitDeltas(t, s.Recorder, 1), "an actor that keeps up publishes each piece at once")
	burst <- struct{}{}
	require.Equal(t, []string{"f"}, awaitDeltas(t, s.Recorder, 1))
	burst <- struct{}{}
	end := s.Await(t, convtest.Terminal)
	require.EqualValues(t, "chat.done", end.Type)
}

// startPaced starts an actor in adaptive mode whose Pacer the test moves (it is not
// started), subscribed to a session with a run whose agent the test steps. published
// waits for a delta of text: published after the pass that handled it, so awaited,
// since a round trip's reply comes before the end of its own pass.
func startPaced(t *testing.T) (st *store.Store, agent *stepper, pacer *conversation.Pacer, clock *clockwork.FakeClock, a *conversation.Actor, s *convtest.Recorder, published func(text string)) {
	t.Helper()
	st = storetest.New(t)
	agent = newStepper()
	pacer = conversation.NewPacer(clockwork.NewFakeClock(), 0, nil, nil)
	clock, a, s = startCoalescingWith(t, conversation.Config{Store: st, Agent: agent, CoalesceDeltas: conversation.CoalesceAdaptive, Pacer: pacer})
	_, err := a.Send(testCtx(t), conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	published = func(text string) {
		t.Helper()
		s.Await(t, func(f *conversation.Event) bool { return f.Type == "chat.delta" && f.Text == text })
	}
	return st, agent, pacer, clock, a, s, published
}

// While the process is behind (its Pacer has a window open), adaptive coalescing holds
// a session's text for the window even when the actor itself keeps up; once the window
// closes, text goes out as the actor catches up, as before.
func TestAdaptiveCoalescingHoldsForThePacersWindow(t *testing.T) {
	t.Parallel()
	st, agent, pacer, clock, a, s, published := startPaced(t)
	require.NoError(t, agent.play(t, a, script.Text("one")))
	published("one") // the process keeps up: at once

	const w = 40 * time.Millisecond
	pacer.SetWindow(w)
	// The first piece since the window opened: nothing says more follows within it
	// (TestAdaptiveCoalescingHoldsOnlyWhatTheWindowCanMerge).
	require.NoError(t, agent.play(t, a, script.Text(" two")))
	published(" two")
	require.NoError(t, agent.play(t, a, script.Text(" three")))
	require.NoError(t, agent.play(t, a, script.Text(" four")))
	require.Equal(t, []string{"one", " two"}, deltas(s), "held for the window though the actor has nothing queued")
	waitTimers(t, clock, 1)
	clock.Advance(w - time.Nanosecond)
	roundTrip(t, a)
	require.Equal(t, []string{"one", " two"}, deltas(s), "the window has not passed")
	clock.Advance(time.Nanosecond)
	published(" three four")

	// Text held when the window closes goes out with the actor's next pass (whichever
	// comes first: the round trip's, or one for a stored write), the clock untouched.
	require.NoError(t, agent.play(t, a, script.Text(" five")))
	published(" five") // a window after " four"
	require.NoError(t, agent.play(t, a, script.Text(" six")))
	waitTimers(t, clock, 1) // held for a window: it came within one of " five"
	require.Equal(t, []string{"one", " two", " three four", " five"}, deltas(s))
	pacer.SetWindow(0)
	roundTrip(t, a)
	published(" six")
	require.NoError(t, agent.play(t, a, script.Text(" seven")))
	published(" seven") // closed: at once again
	require.Equal(t, []string{"one", " two", " three four", " five", " six", " seven"}, deltas(s))

	close(agent.steps)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	requireDeltasAreStored(t, st, a, s)
}

// A window only holds text that more text follows within it: a session whose text comes
// further apart than the window (a model's 50 tokens a second against a window of 5 or
// 10 ms) would get the window's latency and no merging, so its text goes out at once.
func TestAdaptiveCoalescingHoldsOnlyWhatTheWindowCanMerge(t *testing.T) {
	t.Parallel()
	st, agent, pacer, clock, a, s, published := startPaced(t)

	const w = 10 * time.Millisecond
	pacer.SetWindow(w)
	require.NoError(t, agent.play(t, a, script.Text("one")))
	published("one") // the first since the window opened: nothing came within it
	for _, text := range []string{" two", " three"} {
		clock.Advance(2 * w)
		require.NoError(t, agent.play(t, a, script.Text(text)))
		published(text) // 20 ms after the last: at once
	}
	clock.Advance(w - time.Millisecond)
	require.NoError(t, agent.play(t, a, script.Text(" four")))
	require.NoError(t, agent.play(t, a, script.Text(" five")))
	waitTimers(t, clock, 1) // closer together than the window: held for it
	require.Equal(t, []string{"one", " two", " three"}, deltas(s))
	clock.Advance(w)
	published(" four five")

	close(agent.steps)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	requireDeltasAreStored(t, st, a, s)
}

// holdingSubscriber is a stallingSubscriber that can hold events (a
// HoldingSubscriber): held ones are applied, in order, on Release or ahead of the next
// delivered one, as the transport's outbox sends them.
type holdingSubscriber struct {
	*stallingSubscriber
	mu         sync.Mutex
	pending    []*conversation.Event
	held       []string
	releases   int
	maxPending int
}

func (s *holdingSubscriber) Hold(ev *conversation.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(s.pending, ev)
	if ev.Type == conversation.EventDelta {
		s.held = append(s.held, ev.Text)
	}
	return true
}

func (s *holdingSubscriber) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases++
	s.sendPending()
}

func (s *holdingSubscriber) sendPending() {
	s.maxPending = max(s.maxPending, len(s.pending))
	for _, ev := range s.pending {
		s.Recorder.Deliver(ev)
	}
	s.pending = nil
}

func (s *holdingSubscriber) Deliver(ev *conversation.Event) bool {
	s.mu.Lock()
	s.sendPending()
	s.mu.Unlock()
	return s.stallingSubscriber.Deliver(ev)
}

// With coalescing off, what the actor publishes while more work is queued behind it is
// held by a subscriber that can hold (one write for several events), and sent once the
// actor has caught up; an actor that keeps up delivers each event at once.
func TestEventsHeldWhileTheActorIsBehind(t *testing.T) {
	t.Parallel()
	s := &holdingSubscriber{stallingSubscriber: &stallingSubscriber{Recorder: convtest.New(), stalled: make(chan struct{}), release: make(chan struct{})}}
	burst, sent := startBurst(t, 0, s)

	<-s.stalled
	burst <- struct{}{}
	<-sent // b, c and d are queued behind "a"
	close(s.release)
	require.Equal(t, []string{"a", "b", "c", "d"}, awaitDeltas(t, s.Recorder, 4), "one delta per piece, in order")
	s.mu.Lock()
	require.Equal(t, []string{"b", "c"}, s.held, "held while more was queued behind them; d went with them")
	s.mu.Unlock()
	burst <- struct{}{}
	require.Equal(t, []string{"e"}, awaitDeltas(t, s.Recorder, 1))
	burst <- struct{}{}
	require.Equal(t, []string{"f"}, awaitDeltas(t, s.Recorder, 1))
	burst <- struct{}{}
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, []string{"b", "c"}, s.held, "nothing held while the actor kept up")
	require.GreaterOrEqual(t, s.releases, 1)
}

// An actor that stays behind (40 pieces queued at once) still has what it holds sent
// every maxBehindPasses intents, not once the whole backlog is handled.
func TestHoldingIsBoundedWhileTheActorStaysBehind(t *testing.T) {
	t.Parallel()
	const pieces = 40
	burst, sent := make(chan struct{}), make(chan struct{})
	first := newFirstQueued()
	agent := conversation.AgentFunc(func(ctx context.Context, _ conversation.Request, out conversation.Emitter) error {
		if err := first.text(out, "a"); err != nil {
			return err
		}
		<-burst
		for range pieces { // all queued while the actor is stalled delivering "a"
			if err := out.Text("b"); err != nil {
				return err
			}
		}
		close(sent)
		return nil
	})
	s := &holdingSubscriber{stallingSubscriber: &stallingSubscriber{Recorder: convtest.New(), stalled: make(chan struct{}), release: make(chan struct{})}}
	first.queue(startRun(t, conversation.Config{Store: storetest.New(t), Agent: agent, InboxSize: 2 * pieces}, s))
	<-s.stalled
	close(burst)
	<-sent
	close(s.release)
	require.EqualValues(t, "chat.done", s.Await(t, convtest.Terminal).Type)
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Greater(t, len(s.held), pieces/2, "the backlog was held")
	require.LessOrEqual(t, s.maxPending, 16, "but sent at least every 16 intents")
}
