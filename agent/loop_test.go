package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/agent/tools"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// harness runs the real loop inside a real actor on a real database, with a scripted
// model; the loop's clock (approval timeouts, retry backoff) is fake.
type harness struct {
	t     *testing.T
	st    *store.Store
	clock *clockwork.FakeClock
	actor *conversation.Actor
	sub   *wstest.Sub
	sbs   *agent.Sandboxes // set by sandboxHarness
}

func newHarness(t *testing.T, model agent.Model, edit ...func(*agent.Config)) *harness {
	t.Helper()
	return newHarnessWithStore(t, model, nil, edit...)
}

// newHarnessWithStore is newHarness with a hook that sees the harness's store before the
// loop is built (to give the loop session sandboxes kept in that store).
func newHarnessWithStore(t *testing.T, model agent.Model, withStore func(*store.Store, *agent.Config), edit ...func(*agent.Config)) *harness {
	t.Helper()
	return newHarnessConv(t, model, withStore, nil, edit...)
}

// newHarnessConv is newHarnessWithStore with a hook on the actor's config too.
func newHarnessConv(t *testing.T, model agent.Model, withStore func(*store.Store, *agent.Config), convEdit func(*conversation.Config), edit ...func(*agent.Config)) *harness {
	t.Helper()
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	cfg := agent.Config{Model: model, Clock: clock, Logger: log}
	if withStore != nil {
		withStore(st, &cfg)
	}
	for _, e := range edit {
		e(&cfg)
	}
	loop, err := agent.New(cfg)
	require.NoError(t, err)
	convCfg := conversation.Config{
		Store:  st,
		Agent:  loop,
		Clock:  clockwork.NewFakeClock(), // the actor's own timers stay still
		Logger: log,
	}
	if convEdit != nil {
		convEdit(&convCfg)
	}
	a := conversation.Start(convCfg, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	sub := wstest.NewSub()
	_, err = a.Hello(context.Background(), conversation.HelloRequest{Create: true, Subscriber: sub})
	require.NoError(t, err)
	return &harness{t: t, st: st, clock: clock, actor: a, sub: sub}
}

func withTools(ts ...agent.Tool) func(*agent.Config) {
	return func(c *agent.Config) {
		r, err := agent.NewRegistry(ts...)
		if err != nil {
			panic(err)
		}
		c.Tools = r
	}
}

func (h *harness) send(content string) {
	h.t.Helper()
	_, err := h.actor.Send(context.Background(), conversation.SendRequest{RequestID: uuid.NewString(), Content: content})
	require.NoError(h.t, err)
}

// end waits for the run's terminal event.
func (h *harness) end() wstest.Frame {
	h.t.Helper()
	return h.sub.Await(h.t, wstest.Frame.Terminal)
}

// await waits for the next event of a type.
func (h *harness) await(typ string) wstest.Frame {
	h.t.Helper()
	return h.sub.Await(h.t, func(f wstest.Frame) bool { return f.Type == typ })
}

// stored returns the session's messages from the database, and checks the subscriber
// holds exactly the same.
func (h *harness) stored() []wstest.Message {
	h.t.Helper()
	msgs, _, err := h.st.MessagesBefore(context.Background(), h.actor.SessionID(), 0, 1000)
	require.NoError(h.t, err)
	out, err := wstest.FromStore(msgs)
	require.NoError(h.t, err)
	require.Empty(h.t, wstest.Diff(out, h.sub.Messages()), "the subscriber's state differs from the database")
	return out
}

// waitTimers waits until the loop's clock has n timers.
func (h *harness) waitTimers(n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(h.t, h.clock.BlockUntilContext(ctx, n))
}

// funcTool is a tool made of a function.
type funcTool struct {
	spec agent.ToolSpec
	run  func(ctx context.Context, input json.RawMessage, env agent.Env) (string, error)
}

func (f funcTool) Spec() agent.ToolSpec { return f.spec }
func (f funcTool) Run(ctx context.Context, input json.RawMessage, env agent.Env) (string, error) {
	return f.run(ctx, input, env)
}

func tool(name string, run func(ctx context.Context, input json.RawMessage, env agent.Env) (string, error)) funcTool {
	return funcTool{spec: agent.ToolSpec{Name: name, Description: name}, run: run}
}

// The model calls a tool, gets its result back, and answers: two steps, two segments.
func TestMultiStepToolUse(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: modeltest.Events(modeltest.Text("Let me check", " the time."), []agent.ModelEvent{
			modeltest.Call("t1", "current_time", `{"timezone": "Europe/Paris"}`),
			modeltest.Usage(100, 20),
		})},
		modeltest.Turn{Events: modeltest.Events(modeltest.Text("It is Friday."), []agent.ModelEvent{modeltest.Usage(150, 5)})},
	)
	h := newHarness(t, model, withTools(tools.CurrentTime{Clock: clockwork.NewFakeClockAt(time.Date(2026, 11, 20, 22, 0, 0, 0, time.UTC))}))
	h.send("what time is it?")
	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	require.EqualValues(t, 250, end.Run.Usage.InputTokens)
	require.EqualValues(t, 25, end.Run.Usage.OutputTokens)
	// The context is the last call's prompt and answer, against the configured window.
	require.EqualValues(t, 155, end.Run.Usage.ContextTokens)
	require.EqualValues(t, agent.DefaultContextTokens, end.Run.Usage.ContextWindow)
	run := h.endedRun(end)
	require.Equal(t, chat.Usage{InputTokens: 250, OutputTokens: 25, ContextTokens: 155, ContextWindow: agent.DefaultContextTokens}, run.Usage)

	msgs := h.stored()
	require.Len(t, msgs, 4)
	require.Equal(t, "Let me check the time.", msgs[1].Content)
	require.Equal(t, "current_time", msgs[2].Tool.Name)
	require.Equal(t, "ok", msgs[2].Tool.Status)
	require.Equal(t, "Friday, 2026-11-20T23:00:00+01:00", *msgs[2].Tool.Output)
	require.Equal(t, "It is Friday.", msgs[3].Content)

	// The second model call saw the first answer, its tool call and the result.
	reqs := model.Requests()
	require.Len(t, reqs, 2)
	second := reqs[1].Messages
	require.Len(t, second, 3)
	require.Equal(t, agent.RoleUser, second[0].Role)
	require.Equal(t, "Let me check the time.", second[1].Text)
	require.Equal(t, "t1", second[1].ToolCalls[0].ID)
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "t1", ToolName: "current_time", Result: "Friday, 2026-11-20T23:00:00+01:00"}, second[2])
	require.Equal(t, []string{"current_time"}, names(reqs[0].Tools))
}

func names(specs []agent.ToolSpec) []string {
	var out []string
	for _, s := range specs {
		out = append(out, s.Name)
	}
	return out
}

// Models reuse tool call ids across steps; the run keeps them unique, consistently for the
// transcript and for the model.
func TestReusedToolCallIDsAreMadeUnique(t *testing.T) {
	t.Parallel()
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) { return string(in), nil })
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("call_0", "echo", `{"n":1}`)}},
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("call_0", "echo", `{"n":2}`)}},
		modeltest.Say("done"),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("go")
	require.Equal(t, "chat.done", h.end().Type)
	msgs := h.stored()
	require.Equal(t, "call_0", msgs[1].Tool.CallID)
	require.Equal(t, "call_0-2", msgs[2].Tool.CallID)
	last := model.Requests()[2].Messages
	require.Equal(t, "call_0-2", last[3].ToolCalls[0].ID)
	require.Equal(t, "call_0-2", last[4].ToolCallID)
}
