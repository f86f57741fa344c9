package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/transport/wstest"
)

// staleModel calls tool once, then answers.
func staleModel(tool string) *modeltest.Model {
	return modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("c1", tool, `{}`)}},
		modeltest.Turn{Events: modeltest.Text("Noted.")},
	)
}

// A tool call that sends no output and reports no progress for CHATD_TOOL_STALE is
// stopped: it ends as an error that says it was stale, and the model is told so.
func TestStaleToolIsStopped(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	quiet := tool("quiet", func(ctx context.Context, _ json.RawMessage, _ agent.Env) (string, error) {
		close(started)
		<-ctx.Done()
		return "", ctx.Err()
	})
	model := staleModel("quiet")
	h := newHarness(t, model, withTools(quiet), func(c *agent.Config) { c.ToolStale = time.Minute })
	h.send("go")
	<-started
	h.waitTimers(1) // the watch
	h.clock.Advance(time.Minute - time.Millisecond)
	require.Len(t, model.Requests(), 1, "not stale yet")
	h.clock.Advance(time.Millisecond)
	end := h.end()
	require.Equal(t, "chat.done", end.Type, "the run goes on")
	msgs := h.stored()
	require.Equal(t, "error", msgs[1].Tool.Status)
	require.Contains(t, *msgs[1].Tool.Output, "stale")
	told := model.Requests()[1].Messages[2]
	require.Equal(t, agent.RoleTool, told.Role)
	require.True(t, told.IsError)
	require.Contains(t, told.Result, "stale: the tool sent no output and reported no progress for 1m0s")
}

// A call that keeps sending output or progress is never stale, however long it runs; a
// tool that says it is never stale is not watched.
func TestChattyToolIsNotStale(t *testing.T) {
	t.Parallel()
	step := make(chan string)
	chatty := tool("chatty", func(ctx context.Context, _ json.RawMessage, env agent.Env) (string, error) {
		for s := range step {
			var err error
			if s == "progress" {
				err = env.Progress(1, 2, "half")
			} else {
				_, err = env.Output().Write([]byte(s))
			}
			if err != nil {
				return "", err
			}
		}
		return "finished", ctx.Err()
	})
	model := staleModel("chatty")
	h := newHarness(t, model, withTools(chatty), func(c *agent.Config) { c.ToolStale = time.Minute })
	h.send("go")
	h.await("tool.start")
	h.waitTimers(1)
	for i, s := range []string{"a", "b", "progress", "c"} {
		h.clock.Advance(50 * time.Second) // 200 s in all, never 60 without a sign
		step <- s
		if s == "progress" {
			h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Progress != nil })
		} else {
			h.await("tool.output")
		}
		require.Len(t, model.Requests(), 1, "step %d: still running", i)
	}
	close(step)
	require.Equal(t, "chat.done", h.end().Type)
	msgs := h.stored()
	require.Equal(t, "ok", msgs[1].Tool.Status)
	require.Equal(t, "finished", *msgs[1].Tool.Output)

	// A tool that is never stale.
	release := make(chan struct{})
	patient := funcTool{spec: agent.ToolSpec{Name: "patient", Description: "waits", StaleAfter: -1}, run: func(ctx context.Context, _ json.RawMessage, _ agent.Env) (string, error) {
		<-release
		return "waited", nil
	}}
	model = staleModel("patient")
	h = newHarness(t, model, withTools(patient), func(c *agent.Config) { c.ToolStale = time.Minute })
	h.send("go")
	h.await("tool.start")
	h.clock.Advance(time.Hour)
	close(release)
	require.Equal(t, "chat.done", h.end().Type)
	msgs = h.stored()
	require.Equal(t, "ok", msgs[1].Tool.Status)
	require.False(t, strings.Contains(*msgs[1].Tool.Output, "stale"))
}
