package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// A tool reports progress through its env, and a model through EventProgress: both reach
// the run (a run.status each). A report the run refuses is an error for the tool, which
// goes on, and is ignored for the model, whose answer goes on.
func TestToolsAndModelsReportProgress(t *testing.T) {
	t.Parallel()
	var refused error
	pages := tool("read_pages", func(_ context.Context, _ json.RawMessage, env agent.Env) (string, error) {
		for i := 1; i <= 3; i++ {
			if err := env.Progress(i, 3, "pages"); err != nil {
				return "", err
			}
		}
		refused = env.Progress(4, 3, "pages")
		return "read 3 pages", nil
	})
	progress := func(step, of int, label string) agent.ModelEvent {
		return agent.ModelEvent{Kind: agent.EventProgress, Progress: agent.Progress{Step: step, Of: of, Label: label}}
	}
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{progress(0, 2, "steps"), modeltest.Call("p1", "read_pages", `{}`)}},
		modeltest.Turn{Events: modeltest.Events(modeltest.Text("Done."), []agent.ModelEvent{progress(-1, 2, "bad"), progress(2, 2, "steps")})},
	)
	h := newHarness(t, model, withTools(pages))
	h.send("read them")
	end := h.end()
	require.Equal(t, "chat.done", end.Type, "a refused report ends nothing")
	require.Equal(t, &wstest.Progress{Step: 2, Of: 2, Label: "steps"}, end.Run.Progress)

	var seen []wstest.Progress
	for _, f := range h.sub.Frames() {
		if f.Type == "run.status" && f.Run.Progress != nil {
			seen = append(seen, *f.Run.Progress)
		}
	}
	require.Equal(t, []wstest.Progress{
		{Step: 0, Of: 2, Label: "steps"},
		{Step: 1, Of: 3, Label: "pages"}, {Step: 2, Of: 3, Label: "pages"}, {Step: 3, Of: 3, Label: "pages"},
		{Step: 2, Of: 2, Label: "steps"},
	}, seen)
	var ce *conversation.Error
	require.ErrorAs(t, refused, &ce)
	require.Equal(t, conversation.CodeBadRequest, ce.Code)
	msgs := h.stored()
	require.Len(t, msgs, 3) // the user's, the tool call, "Done."
	require.Equal(t, "ok", msgs[1].Tool.Status, "the tool went on after its refused report")
}
