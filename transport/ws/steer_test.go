package ws_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// slowTool answers once the test lets it.
type slowTool struct{ release chan struct{} }

func (slowTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{Name: "slow", Description: "takes its time", InputSchema: json.RawMessage(`{"type":"object"}`)}
}

func (s slowTool) Run(ctx context.Context, _ json.RawMessage, _ agent.Env) (string, error) {
	select {
	case <-s.release:
		return "the tool's result", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// steer: a message sent while a tool runs reaches the model in the same run, after the
// tool's result, as a user turn; the model is not asked again for what it did, the tool
// does not run again, and both tabs see the message queued as steering, then in the run.
func TestSendWhileRunningSteer(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: append(modeltest.Text("Looking. "), modeltest.Call("c1", "slow", `{}`))},
		modeltest.Say("Done, and about the second question too."),
	)
	tool := slowTool{release: make(chan struct{})}
	reg, err := agent.NewRegistry(tool)
	require.NoError(t, err)
	loop, err := agent.New(agent.Config{Model: model, Tools: reg, Clock: clockwork.NewFakeClock(), ModelIdleTimeout: -1})
	require.NoError(t, err)
	e := newEnv(t, envOptions{agent: loop})
	a := e.session()
	b := e.join(a.State.SessionID)

	first := a.Chat("r1", "look it up")
	require.Equal(t, "ack", first.Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "tool.start" })

	ack := sendWhile(b, "r2", "and also the second question", "steer")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "steering", ack.Status)
	require.Equal(t, first.RunID, ack.RunID, "it goes to the active run")
	for _, c := range []*wstest.Client{a, b} {
		f := c.Await(func(f wstest.Frame) bool { return f.Type == "queue.updated" && len(f.Queued) == 1 })
		require.Equal(t, "steering", f.Queued[0].Status)
	}
	again := sendWhile(a, "r2", "and also the second question", "steer")
	require.True(t, again.Duplicate)
	require.Equal(t, "steering", again.Status)

	close(tool.release)
	for _, c := range []*wstest.Client{a, b} {
		added := c.Await(func(f wstest.Frame) bool { return f.Type == "message.added" })
		require.Equal(t, "user", added.Message.Role)
		require.Equal(t, "and also the second question", added.Message.Content)
		require.Equal(t, first.RunID, added.RunID)
		c.Await(func(f wstest.Frame) bool { return f.Type == "queue.updated" && len(f.Queued) == 0 })
		end := c.ReadTerminal()
		require.Equal(t, "chat.done", end.Type)
		require.Equal(t, first.RunID, end.RunID)
	}

	// The model was asked twice: the second time with everything so far, then the
	// steering message after the tool's result.
	reqs := model.Requests()
	require.Len(t, reqs, 2)
	require.Len(t, reqs[0].Messages, 1)
	second := reqs[1].Messages
	require.Len(t, second, 4)
	require.Equal(t, agent.RoleUser, second[0].Role)
	require.Equal(t, "look it up", second[0].Text)
	require.Equal(t, agent.RoleAssistant, second[1].Role)
	require.Equal(t, "Looking. ", second[1].Text)
	require.Len(t, second[1].ToolCalls, 1)
	require.Equal(t, "the tool's result", second[2].Result)
	require.Equal(t, agent.RoleUser, second[3].Role)
	require.Equal(t, "and also the second question", second[3].Text)

	// One run; the steering message is a user message of it, after the tool's result.
	var roles []string
	for _, m := range e.dbMessages(a.State.SessionID) {
		if m.Role == "tool" {
			roles = append(roles, "tool")
			continue
		}
		roles = append(roles, m.Role+":"+m.Content)
	}
	require.Equal(t, []string{"user:look it up", "assistant:Looking. ", "tool", "user:and also the second question", "assistant:Done, and about the second question too."}, roles)
	_, err = e.store.RunByRequest(context.Background(), uuid.MustParse(a.State.SessionID), "r2")
	require.Error(t, err, "no run of its own")
	late := sendWhile(a, "r2", "and also the second question", "steer")
	require.True(t, late.Duplicate)
	require.Equal(t, "steered", late.Status)
	require.Equal(t, chat.RunDone, storedRun(t, e, a.State.SessionID, "r1").Status)
	e.requireConverged(a.State.SessionID, a, b)
}

// A steering message whose run ends before a step boundary (here an agent that never
// asks for one) is queued: it starts its own run when the run ends.
func TestSteerWithoutABoundaryIsQueued(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.PerRun(func(req conversation.Request) []script.Step {
		return []script.Step{script.Text("re: " + req.Content), gate.Wait()}
	})})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Equal(t, "ack", a.Chat("r1", "first").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	require.Equal(t, "steering", sendWhile(b, "r2", "by the way", "steer").Status)
	require.NoError(t, gate.Pass(testCtx(t)))
	for _, c := range []*wstest.Client{a, b} {
		f := c.Await(func(f wstest.Frame) bool {
			return f.Type == "queue.updated" && len(f.Queued) == 1 && f.Queued[0].Status == "queued"
		})
		require.Equal(t, "r2", f.Queued[0].RequestID)
		started := c.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" && f.RequestID == "r2" })
		require.Equal(t, "by the way", started.UserMessage.Content)
	}
	require.NoError(t, gate.Pass(testCtx(t)))
	a.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r2" })
	b.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r2" })
	require.Equal(t, chat.RunDone, storedRun(t, e, a.State.SessionID, "r2").Status)
	e.requireConverged(a.State.SessionID, a, b)
}

// A steer, named, with no active run is no_run and stores nothing; the same requestId
// may then start a run.
func TestSteerWithoutARun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("hi"))})
	a := e.session()
	bad := sendWhile(a, "r1", "steer nothing", "steer")
	require.Equal(t, "no_run", bad.Code, "%s", bad.Raw)
	require.Empty(t, e.dbMessages(a.State.SessionID))
	require.Equal(t, "ack", a.Chat("r1", "steer nothing").Type)
	a.ReadTerminal()
}
