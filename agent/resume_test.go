package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// A run continued from its checkpoint goes through the real loop with a scripted model
// and a recording emitter: what the loop emits, what it runs and what the model is
// asked are all visible.

// continueRun runs req through l in the background; the channel receives its result.
func continueRun(t *testing.T, l *agent.Loop, rec *agenttest.Recorder, req conversation.Request) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Run(t.Context(), req, rec) }()
	return done
}

// counted is a tool that counts its calls and answers answer(input).
func counted(spec agent.ToolSpec, runs *atomic.Int32, answer func(json.RawMessage, agent.Env) string) funcTool {
	if spec.Description == "" {
		spec.Description = spec.Name
	}
	return funcTool{spec: spec, run: func(_ context.Context, in json.RawMessage, env agent.Env) (string, error) {
		runs.Add(1)
		return answer(in, env), nil
	}}
}

// interrupted is a call the actor stored as interrupted: its output is what streamed
// before, or the actor's note when nothing had.
func interrupted(id, name, input, output string) chat.Message {
	const note = "the call was running when the server stopped; whether it had any effect is unknown"
	if output == "" {
		output = note
	}
	m := called(id, name, input, output, chat.ToolInterrupted)
	m.Error = &chat.ErrorInfo{Code: "interrupted", Message: note}
	return m
}

func toolMsg(id, name, result string, isError bool) agent.Message {
	return agent.Message{Role: agent.RoleTool, ToolCallID: id, ToolName: name, Result: result, IsError: isError}
}

func callOf(id, name, input string) agent.ToolCall {
	return agent.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)}
}

// Calls the checkpoint holds settled (ok, error, denied, cancelled, interrupted) reach
// the model as their results and are never run again; their ids stay taken.
func TestCheckpointSettledCallsAreResults(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	probe := counted(agent.ToolSpec{Name: "probe", Idempotent: true}, &runs, func(json.RawMessage, agent.Env) string { return "probed" })
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("a", "probe", `{"n":6}`)}},
		modeltest.Say("Done."),
	)
	l, _ := agenttest.NewLoop(t, model, probe)
	failed := called("b", "probe", `{"n":2}`, "partial", chat.ToolError)
	failed.Error = &chat.ErrorInfo{Code: "tool_error", Message: "boom"}
	checkpoint := []chat.Message{
		thought("Look first.", `{"signature":"sig"}`),
		said("Let me look.", chat.MessageComplete),
		called("a", "probe", `{"n":1}`, "found it", chat.ToolOK),
		failed,
		called("c", "probe", `{"n":3}`, "", chat.ToolDenied),
		called("d", "probe", `{"n":4}`, "", chat.ToolCancelled),
		interrupted("e", "probe", `{"n":5}`, "half a line"),
		interrupted("f", "probe", `{"n":7}`, ""),
	}
	rec := &agenttest.Recorder{}
	err := agenttest.Wait(t, continueRun(t, l, rec, conversation.Request{Content: "find it", Checkpoint: checkpoint}), "the run")
	require.NoError(t, err)

	require.Equal(t, []string{
		`tool.start: a-2 probe {"n":6}`, // the checkpoint's "a" is taken
		"tool.end: a-2 ok probed",
		"text: Done.",
	}, rec.Log(), "nothing of the checkpoint is emitted again")
	require.EqualValues(t, 1, runs.Load(), "only the new call ran")

	reqs := model.Requests()
	require.Len(t, reqs, 2)
	require.Empty(t, reqs[0].Continue)
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "find it"},
		{Role: agent.RoleAssistant, Text: "Let me look.", Reasoning: []agent.Reasoning{{Text: "Look first.", Signature: "sig"}}, ToolCalls: []agent.ToolCall{
			callOf("a", "probe", `{"n":1}`), callOf("b", "probe", `{"n":2}`), callOf("c", "probe", `{"n":3}`),
			callOf("d", "probe", `{"n":4}`), callOf("e", "probe", `{"n":5}`), callOf("f", "probe", `{"n":7}`),
		}},
		toolMsg("a", "probe", "found it", false),
		toolMsg("b", "probe", "partial\n[error: boom]", true),
		toolMsg("c", "probe", conversation.DeclinedOutput, true),
		toolMsg("d", "probe", "The tool call did not finish: its run was stopped.", true),
		toolMsg("e", "probe", agent.InterruptedResult+"\nIts output until then:\nhalf a line", true),
		toolMsg("f", "probe", agent.InterruptedResult, true),
	}, reqs[0].Messages)
}

// What the model is told of an interrupted call says it was cut off when the server
// stopped and that its effects are unknown, so the model checks before it relies on it
// or repeats it.
func TestInterruptedResultWording(t *testing.T) {
	t.Parallel()
	require.Equal(t, "The tool call was cut off: the server stopped while it was running. "+
		"It did not finish and was not run again; whether it had any effect is unknown.", agent.InterruptedResult)
}

// Calls the checkpoint holds as running were cut off with their process: an idempotent
// tool's call runs again, once, on its id; any other is ended interrupted without
// running, and the model is told so, with the output it had streamed. Then the model
// is called with both results.
func TestCheckpointRunningCalls(t *testing.T) {
	t.Parallel()
	var clockRuns, launchRuns atomic.Int32
	clock := counted(agent.ToolSpec{Name: "clock", Idempotent: true}, &clockRuns, func(_ json.RawMessage, env agent.Env) string {
		_, _ = env.Output().Write([]byte("tick"))
		return "noon"
	})
	launch := counted(agent.ToolSpec{Name: "launch"}, &launchRuns, func(json.RawMessage, agent.Env) string { return "launched" })
	model := modeltest.New(modeltest.Say("Launched, maybe."))
	l, _ := agenttest.NewLoop(t, model, clock, launch)
	checkpoint := []chat.Message{
		said("Both at once.", chat.MessageComplete),
		called("t1", "clock", `{}`, "", chat.ToolRunning),
		called("l1", "launch", `{"target":"moon"}`, "3, 2, 1", chat.ToolRunning),
	}
	rec := &agenttest.Recorder{}
	err := agenttest.Wait(t, continueRun(t, l, rec, conversation.Request{Content: "go", Checkpoint: checkpoint}), "the run")
	require.NoError(t, err)

	require.EqualValues(t, 1, clockRuns.Load(), "the idempotent call ran again, once")
	require.Zero(t, launchRuns.Load(), "the other was not run again")
	require.Equal(t, []string{
		"tool.end: l1 interrupted ",
		"tool.output: t1 tick",
		"tool.end: t1 ok noon",
		"text: Launched, maybe.",
	}, rec.Log(), "no call is started again: both keep their ids")

	reqs := model.Requests()
	require.Len(t, reqs, 1)
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "go"},
		{Role: agent.RoleAssistant, Text: "Both at once.", ToolCalls: []agent.ToolCall{callOf("t1", "clock", `{}`), callOf("l1", "launch", `{"target":"moon"}`)}},
		toolMsg("t1", "clock", "noon", false),
		toolMsg("l1", "launch", agent.InterruptedResult+"\nIts output until then:\n3, 2, 1", true),
	}, reqs[0].Messages)
}

// A running call of a tool the agent no longer has is ended interrupted too: nothing
// can run it again.
func TestCheckpointRunningCallOfAnUnknownTool(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Say("OK."))
	l, _ := agenttest.NewLoop(t, model)
	rec := &agenttest.Recorder{}
	checkpoint := []chat.Message{called("g1", "gone", `{}`, "", chat.ToolRunning)}
	require.NoError(t, agenttest.Wait(t, continueRun(t, l, rec, conversation.Request{Content: "go", Checkpoint: checkpoint}), "the run"))
	require.Equal(t, []string{"tool.end: g1 interrupted ", "text: OK."}, rec.Log())
	require.Equal(t, toolMsg("g1", "gone", agent.InterruptedResult, true), model.Requests()[0].Messages[2])
}

// Calls the checkpoint holds as awaiting approval wait for their decisions with
// AwaitDecision (they are not stored again); an approved one then runs, once, and a
// denied one does not.
func TestCheckpointAwaitingCallsWaitForTheirDecisions(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	deploy := counted(agent.ToolSpec{Name: "deploy", NeedsApproval: true}, &runs, func(in json.RawMessage, _ agent.Env) string {
		var v struct{ Env string }
		_ = json.Unmarshal(in, &v)
		return "deployed " + v.Env
	})
	model := modeltest.New(modeltest.Say("Deployed to prod only."))
	l, _ := agenttest.NewLoop(t, model, deploy)
	checkpoint := []chat.Message{
		called("s1", "deploy", `{"env":"prod"}`, "", chat.ToolAwaitingApproval),
		called("s2", "deploy", `{"env":"dev"}`, "", chat.ToolAwaitingApproval),
	}
	rec := &agenttest.Recorder{Hold: make(chan string, 2)}
	done := continueRun(t, l, rec, conversation.Request{Content: "deploy", Checkpoint: checkpoint})
	require.Equal(t, "s1", agenttest.Wait(t, rec.Hold, "the wait for s1"))
	require.Equal(t, "s2", agenttest.Wait(t, rec.Hold, "the wait for s2"))
	require.Equal(t, []string{"tool.await: s1", "tool.await: s2"}, rec.Log())
	require.Empty(t, model.Requests(), "the model waits for the results")

	rec.Give("s2", conversation.Decision{Approved: false})
	rec.Give("s1", conversation.Decision{Approved: true})
	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.EqualValues(t, 1, runs.Load())
	require.Equal(t, []string{
		"tool.await: s1", "tool.await: s2",
		"tool.end: s1 ok deployed prod", // the actor ended s2 as denied
		"text: Deployed to prod only.",
	}, rec.Log())
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "deploy"},
		{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{callOf("s1", "deploy", `{"env":"prod"}`), callOf("s2", "deploy", `{"env":"dev"}`)}},
		toolMsg("s1", "deploy", "deployed prod", false),
		toolMsg("s2", "deploy", conversation.DeclinedOutput, true),
	}, model.Requests()[0].Messages)
}

// A wait taken up from the checkpoint behaves like any wait for a decision: after the
// approval timeout the run is paused, and the decision resumes it.
func TestCheckpointAwaitingCallPausesAfterTheApprovalTimeout(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	deploy := counted(agent.ToolSpec{Name: "deploy", NeedsApproval: true}, &runs, func(json.RawMessage, agent.Env) string { return "deployed" })
	model := modeltest.New(modeltest.Say("Done."))
	l, clock := agenttest.NewLoop(t, model, deploy)
	rec := &agenttest.Recorder{Hold: make(chan string, 1)}
	done := continueRun(t, l, rec, conversation.Request{Content: "deploy", Checkpoint: []chat.Message{
		called("s1", "deploy", `{}`, "", chat.ToolAwaitingApproval),
	}})
	agenttest.Wait(t, rec.Hold, "the wait")

	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the approval timeout
	clock.Advance(agent.DefaultApprovalTimeout)
	// Paused: no timer marks it any more (the janitor kills a paused sandbox).
	poll(t, "the pause", func() bool { return len(rec.Log()) == 2 })
	require.Equal(t, []string{"tool.await: s1", "paused"}, rec.Log())

	rec.Give("s1", conversation.Decision{Approved: true})
	require.NoError(t, agenttest.Wait(t, done, "the run"))
	require.Equal(t, []string{"tool.await: s1", "paused", "resumed", "tool.end: s1 ok deployed", "text: Done."}, rec.Log())
	require.EqualValues(t, 1, runs.Load())
}

// The approval timeout counts from when the call began to wait (its stored created_at),
// not from when this process took it up: a call that waited 4 of 5 minutes before a
// restart pauses one minute after it, and one whose deadline passed while no process ran
// pauses at once.
func TestCheckpointApprovalDeadlineIsStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		waited time.Duration
		left   time.Duration
	}{
		{"four minutes waited", 4 * time.Minute, time.Minute},
		{"deadline passed meanwhile", time.Hour, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			deploy := counted(agent.ToolSpec{Name: "deploy", NeedsApproval: true}, &runs, func(json.RawMessage, agent.Env) string { return "deployed" })
			l, clock := agenttest.NewLoop(t, modeltest.New(modeltest.Say("Done.")), deploy)
			rec := &agenttest.Recorder{Hold: make(chan string, 1)}
			waiting := called("s1", "deploy", `{}`, "", chat.ToolAwaitingApproval)
			waiting.CreatedAt = clock.Now().Add(-tc.waited)
			done := continueRun(t, l, rec, conversation.Request{Content: "deploy", Checkpoint: []chat.Message{waiting}})
			agenttest.Wait(t, rec.Hold, "the wait")

			ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
			defer cancel()
			if tc.left > 0 {
				require.NoError(t, clock.BlockUntilContext(ctx, 1)) // the approval timeout
				clock.Advance(tc.left - time.Nanosecond)
				require.Equal(t, []string{"tool.await: s1"}, rec.Log(), "not before the stored deadline")
				clock.Advance(time.Nanosecond)
			}
			poll(t, "the pause", func() bool { return len(rec.Log()) == 2 })
			require.Equal(t, []string{"tool.await: s1", "paused"}, rec.Log())

			rec.Give("s1", conversation.Decision{Approved: true})
			require.NoError(t, agenttest.Wait(t, done, "the run"))
			require.EqualValues(t, 1, runs.Load())
		})
	}
}

// A checkpoint that ends in assistant text that did not complete is continued: the
// model is asked to go on from it (Continue), the rest streams as new text, and the
// step, cut-off text and rest, is one assistant message from then on.
func TestCheckpointPartialTextIsContinued(t *testing.T) {
	t.Parallel()
	echo := tool("echo", func(context.Context, json.RawMessage, agent.Env) (string, error) { return "echoed", nil })
	model := modeltest.New(
		modeltest.Turn{Events: modeltest.Events(modeltest.Text("rty"), []agent.ModelEvent{modeltest.Call("c1", "echo", `{}`)})},
		modeltest.Say(" Done."),
	)
	l, _ := agenttest.NewLoop(t, model, echo)
	rec := &agenttest.Recorder{}
	history := []chat.Message{user("hello"), said("Hi.", chat.MessageComplete)}
	checkpoint := []chat.Message{said("The answer is fo", chat.MessageStreaming)}
	err := agenttest.Wait(t, continueRun(t, l, rec, conversation.Request{Content: "what is it?", History: history, Checkpoint: checkpoint}), "the run")
	require.NoError(t, err)
	require.Equal(t, []string{"text: rty", "tool.start: c1 echo {}", "tool.end: c1 ok echoed", "text:  Done."}, rec.Log())

	reqs := model.Requests()
	require.Len(t, reqs, 2)
	turn := []agent.Message{
		{Role: agent.RoleUser, Text: "hello"},
		{Role: agent.RoleAssistant, Text: "Hi."},
		{Role: agent.RoleUser, Text: "what is it?"},
	}
	require.Equal(t, "The answer is fo", reqs[0].Continue)
	require.Equal(t, append(turn[:3:3], agent.Message{Role: agent.RoleAssistant, Text: "The answer is fo"}), reqs[0].Messages)
	require.Empty(t, reqs[1].Continue, "only the first call continues")
	require.Equal(t, append(turn[:3:3],
		agent.Message{Role: agent.RoleAssistant, Text: "The answer is forty", ToolCalls: []agent.ToolCall{callOf("c1", "echo", `{}`)}},
		toolMsg("c1", "echo", "echoed", false),
	), reqs[1].Messages)
}

// Text cut off twice (a continuation that was itself cut off) is continued from all of
// it, with the step's reasoning; a step cut off in its reasoning is thought again.
func TestCheckpointContinueShapes(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		checkpoint []chat.Message
		continued  string
		last       agent.Message
	}{
		"cut twice": {
			checkpoint: []chat.Message{thought("Think.", `{"signature":"s"}`), said("Hel", chat.MessageInterrupted), said("lo wor", chat.MessageStreaming)},
			continued:  "Hello wor",
			last:       agent.Message{Role: agent.RoleAssistant, Text: "Hello wor", Reasoning: []agent.Reasoning{{Text: "Think.", Signature: "s"}}},
		},
		"cut in reasoning": {
			checkpoint: []chat.Message{called("c1", "echo", `{}`, "echoed", chat.ToolOK), thought("Now I kno", "")},
			last:       toolMsg("c1", "echo", "echoed", false),
		},
		"an empty segment": {
			checkpoint: []chat.Message{said("Almost", chat.MessageComplete), said("", chat.MessageStreaming)},
			continued:  "Almost",
			last:       agent.Message{Role: agent.RoleAssistant, Text: "Almost"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			model := modeltest.New(modeltest.Say("ld."))
			l, _ := agenttest.NewLoop(t, model)
			rec := &agenttest.Recorder{}
			require.NoError(t, agenttest.Wait(t, continueRun(t, l, rec, conversation.Request{Content: "go", Checkpoint: c.checkpoint}), "the run"))
			req := model.Requests()[0]
			require.Equal(t, c.continued, req.Continue)
			require.Equal(t, c.last, req.Messages[len(req.Messages)-1])
			require.Equal(t, []string{"text: ld."}, rec.Log())
		})
	}
}

// The steps the checkpoint holds count against MaxSteps: a run continued after two of
// three steps gets one more model call.
func TestCheckpointStepsCountAgainstTheLimit(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	echo := counted(agent.ToolSpec{Name: "echo"}, &runs, func(json.RawMessage, agent.Env) string { return "echoed" })
	model := modeltest.New(modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("c3", "echo", `{}`)}})
	reg, err := agent.NewRegistry(echo)
	require.NoError(t, err)
	l, err := agent.New(agent.Config{Model: model, Tools: reg, MaxSteps: 3, ModelIdleTimeout: -1})
	require.NoError(t, err)
	checkpoint := []chat.Message{
		called("c1", "echo", `{}`, "echoed", chat.ToolOK),
		said("Again.", chat.MessageComplete),
		called("c2", "echo", `{}`, "echoed", chat.ToolOK),
	}
	err = agenttest.Wait(t, continueRun(t, l, &agenttest.Recorder{}, conversation.Request{Content: "go", Checkpoint: checkpoint}), "the run")
	require.Equal(t, agent.CodeStepLimit, agenttest.RunError(t, err).Code)
	require.Len(t, model.Requests(), 1)
	require.Zero(t, runs.Load())
}

// The context budget drops older history before any of the checkpoint: the checkpoint
// belongs to the turn being answered, which is always sent whole.
func TestCheckpointOutlastsHistoryInTheBudget(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 2000) // about 500 tokens
	model := modeltest.New(modeltest.Say("."))
	l, err := agent.New(agent.Config{Model: model, ContextTokens: 2000, ModelIdleTimeout: -1})
	require.NoError(t, err)
	history := []chat.Message{user("before"), said(long, chat.MessageComplete)}
	checkpoint := []chat.Message{
		said(long, chat.MessageComplete),
		called("c1", "echo", `{}`, long, chat.ToolOK),
		said(long+"y", chat.MessageComplete),
		called("c2", "echo", `{}`, long, chat.ToolOK),
	}
	req := conversation.Request{Content: "now", History: history, Checkpoint: checkpoint}
	require.NoError(t, agenttest.Wait(t, continueRun(t, l, &agenttest.Recorder{}, req), "the run"))
	require.Equal(t, []agent.Message{
		{Role: agent.RoleUser, Text: "now"},
		{Role: agent.RoleAssistant, Text: long, ToolCalls: []agent.ToolCall{callOf("c1", "echo", `{}`)}},
		toolMsg("c1", "echo", long, false),
		{Role: agent.RoleAssistant, Text: long + "y", ToolCalls: []agent.ToolCall{callOf("c2", "echo", `{}`)}},
		toolMsg("c2", "echo", long, false),
	}, model.Requests()[0].Messages, "over budget, the checkpoint is sent whole and the history is not")
}
