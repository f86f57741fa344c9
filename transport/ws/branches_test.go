package ws_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// modelInputs returns what the model was given at each call: one line per message.
func modelInputs(m *modeltest.Model) []string {
	var out []string
	for _, r := range m.Requests() {
		var lines []string
		for _, msg := range r.Messages {
			lines = append(lines, string(msg.Role)+":"+msg.Text)
		}
		out = append(out, strings.Join(lines, " | "))
	}
	return out
}

// Editing an earlier question and regenerating an earlier answer make branches: each
// becomes the active path for every tab (branch.selected, then the new run), the model
// sees only that path, a tab can switch back, and every tab ends equal to a new tab's
// snapshot and to the database.
func TestBranchesEditRegenerateSelect(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Say("a1"), modeltest.Say("a2"), modeltest.Say("a2 for the edit"),
		modeltest.Say("a1 again"), modeltest.Say("a3"), modeltest.Say("a2 for the edit, again"),
	)
	loop, err := agent.New(agent.Config{Model: model, Clock: clockwork.NewFakeClock(), ModelIdleTimeout: -1})
	require.NoError(t, err)
	e := newEnv(t, envOptions{agent: loop})
	a := e.session()
	b := e.join(a.State.SessionID)

	first := a.Chat("r1", "q1")
	a.ReadTerminal()
	a.Chat("r2", "q2")
	a.ReadTerminal()
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r2" })
	q2 := a.State.Sorted()[2]
	require.Equal(t, "q2", q2.Content)

	// Edit q2 (not the latest message: its answer follows it).
	a.Send(map[string]any{"type": "chat.send", "requestId": "r3", "content": "q2, edited", "editOf": q2.ID})
	ack := a.ReadReply("r3")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	a.ReadTerminal()
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r3" })
	require.Equal(t, []string{"q1", "a1", "q2, edited", "a2 for the edit"}, wstest.Contents(a.State.Sorted()))
	edited := a.State.Sorted()[2]
	require.Equal(t, []string{q2.ID, edited.ID}, edited.Branch.Siblings)
	require.Equal(t, 1, edited.Branch.Index)
	require.Empty(t, wstest.Diff(a.State.Sorted(), b.State.Sorted()), "the other tab followed the edit")
	e.requireConverged(a.State.SessionID, a, b)

	// Regenerate the first answer (an earlier one, on the current path).
	a.Send(map[string]any{"type": "chat.regenerate", "requestId": "r4", "runId": first.RunID})
	regen := a.ReadReply("r4")
	require.Equal(t, "ack", regen.Type, "%s", regen.Raw)
	a.ReadTerminal()
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r4" })
	require.Equal(t, []string{"q1", "a1 again"}, wstest.Contents(a.State.Sorted()))
	require.Equal(t, 1, a.State.Sorted()[1].Branch.Index)
	require.Empty(t, wstest.Diff(a.State.Sorted(), b.State.Sorted()))

	// The model saw only each run's path.
	require.Equal(t, []string{
		"user:q1",
		"user:q1 | assistant:a1 | user:q2",
		"user:q1 | assistant:a1 | user:q2, edited",
		"user:q1",
	}, modelInputs(model))

	// b switches back to the first answer: the branch below it written last (the edit).
	old := a.State.Sorted()[1].Branch.Siblings[0]
	b.Send(map[string]any{"type": "branch.select", "requestId": "s1", "messageId": old})
	require.Equal(t, "ack", b.ReadReply("s1").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "branch.selected" })
	require.Equal(t, []string{"q1", "a1", "q2, edited", "a2 for the edit"}, wstest.Contents(a.State.Sorted()))
	require.Empty(t, wstest.Diff(a.State.Sorted(), b.State.Sorted()))
	e.requireConverged(a.State.SessionID, a, b)
	c := e.join(a.State.SessionID)
	require.Empty(t, wstest.Diff(a.State.Sorted(), c.State.Sorted()), "a new tab's snapshot shows the selected path")

	// A new message answers the selected path.
	a.Chat("r5", "q3")
	a.ReadTerminal()
	require.Equal(t, "user:q1 | assistant:a1 | user:q2, edited | assistant:a2 for the edit | user:q3", modelInputs(model)[4])

	// Another branch is read without selecting it; the path stays.
	b.Send(map[string]any{"type": "history.fetch", "requestId": "h1", "through": q2.ID})
	page := b.ReadReply("h1")
	require.Equal(t, "history", page.Type, "%s", page.Raw)
	require.Equal(t, []string{"q1", "a1", "q2", "a2"}, wstest.Contents(page.Messages))
	require.Equal(t, 0, page.Messages[2].Branch.Index)
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r5" })
	e.requireConverged(a.State.SessionID, a, b)

	// Regenerating the edited question's answer keeps the question's own place among its
	// siblings in every tab, and makes its answer the second of two.
	a.Send(map[string]any{"type": "chat.regenerate", "requestId": "r6", "runId": ack.RunID})
	require.Equal(t, "ack", a.ReadReply("r6").Type)
	a.ReadTerminal()
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r6" })
	shown := a.State.Sorted()
	require.Equal(t, []string{"q1", "a1", "q2, edited", "a2 for the edit, again"}, wstest.Contents(shown))
	require.Equal(t, 1, shown[2].Branch.Index, "the edited question is still the second of two")
	require.Equal(t, 1, shown[3].Branch.Index)
	require.Empty(t, wstest.Diff(shown, b.State.Sorted()))
	e.requireConverged(a.State.SessionID, a, b)
	require.Equal(t, "user:q1 | assistant:a1 | user:q2, edited", modelInputs(model)[5])
}

// Bad branch commands get a clear code and change nothing.
func TestBranchesBadInput(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Say("a1"), modeltest.Say("there"), modeltest.Turn{Events: modeltest.Text("slow"), Hang: true}, modeltest.Say("a1 for the edit"))
	loop, err := agent.New(agent.Config{Model: model, Clock: clockwork.NewFakeClock(), ModelIdleTimeout: -1})
	require.NoError(t, err)
	e := newEnv(t, envOptions{agent: loop})
	a := e.session()
	first := a.Chat("r1", "q1")
	a.ReadTerminal()
	answer := a.State.Sorted()[1]
	other := e.session()
	other.Chat("o1", "elsewhere")
	other.ReadTerminal()
	foreign := other.State.Sorted()[0]

	for name, c := range map[string]struct {
		frame map[string]any
		code  string
	}{
		"editOf not a UUID":          {map[string]any{"type": "chat.send", "requestId": "x1", "content": "hi", "editOf": "nope"}, "bad_request"},
		"editOf an answer":           {map[string]any{"type": "chat.send", "requestId": "x2", "content": "hi", "editOf": answer.ID}, "not_found"},
		"editOf another session's":   {map[string]any{"type": "chat.send", "requestId": "x3", "content": "hi", "editOf": foreign.ID}, "not_found"},
		"editOf nothing":             {map[string]any{"type": "chat.send", "requestId": "x4", "content": "hi", "editOf": uuid.NewString()}, "not_found"},
		"select nothing":             {map[string]any{"type": "branch.select", "requestId": "x5", "messageId": uuid.NewString()}, "not_found"},
		"select another session's":   {map[string]any{"type": "branch.select", "requestId": "x6", "messageId": foreign.ID}, "not_found"},
		"select without a messageId": {map[string]any{"type": "branch.select", "requestId": "x7"}, "bad_request"},
		"regenerate an unknown run":  {map[string]any{"type": "chat.regenerate", "requestId": "x8", "runId": uuid.NewString()}, "not_found"},
		"regenerate without runId":   {map[string]any{"type": "chat.regenerate", "requestId": "x9"}, "bad_request"},
		"read through nothing":       {map[string]any{"type": "history.fetch", "requestId": "x10", "through": uuid.NewString()}, "not_found"},
	} {
		a.SendUnchecked(c.frame) // some break the schema on purpose
		f := a.ReadReply(c.frame["requestId"].(string))
		require.Equal(t, "error", f.Type, "%s: %s", name, f.Raw)
		require.Equal(t, c.code, f.Code, "%s: %s", name, f.Raw)
	}

	// While a run streams, an edit or a regeneration is run_active (an edit with
	// whileRunning interrupt is not).
	a.Chat("r2", "q2")
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RequestID == "r2" })
	user := a.State.Sorted()[0]
	a.Send(map[string]any{"type": "chat.send", "requestId": "y1", "content": "hi", "editOf": user.ID})
	require.Equal(t, "run_active", a.ReadReply("y1").Code)
	a.Send(map[string]any{"type": "chat.regenerate", "requestId": "y2", "runId": first.RunID})
	require.Equal(t, "run_active", a.ReadReply("y2").Code)
	require.Equal(t, []string{"q1", "a1", "q2", "slow"}, wstest.Contents(a.State.Sorted()), "nothing changed")
	a.Send(map[string]any{"type": "chat.send", "requestId": "y3", "content": "q1, edited", "editOf": user.ID, "whileRunning": "interrupt"})
	require.Equal(t, "ack", a.ReadReply("y3").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "y3" })
	require.Equal(t, []string{"q1, edited", "a1 for the edit"}, wstest.Contents(a.State.Sorted()))
	require.Equal(t, 1, a.State.Sorted()[0].Branch.Index)
	e.requireConverged(a.State.SessionID, a)
}

// Switching branches while a run streams does not stop it: tabs that show another branch
// see the run active but not its messages; selecting its branch again shows its text so
// far, then its deltas, and every tab ends equal to the database.
func TestBranchSwitchWhileARunStreams(t *testing.T) {
	t.Parallel()
	gate, end := script.NewGate(), script.NewGate()
	agentScript := script.PerRun(func(req conversation.Request) []script.Step {
		if req.RequestID == "r1" {
			return []script.Step{script.Text("a1")}
		}
		return []script.Step{script.Text("second "), gate.Wait(), script.Text("answer"), end.Wait()}
	})
	e := newEnv(t, envOptions{agent: agentScript})
	a := e.session()
	b := e.join(a.State.SessionID)
	first := a.Chat("r1", "q1")
	a.ReadTerminal()
	oldAnswer := a.State.Sorted()[1]

	a.Send(map[string]any{"type": "chat.regenerate", "requestId": "r2", "runId": first.RunID})
	require.Equal(t, "ack", a.ReadReply("r2").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RequestID == "r2" })
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RequestID == "r2" })
	require.Equal(t, []string{"q1", "second "}, wstest.Contents(b.State.Sorted()))
	streaming := b.State.Sorted()[1]

	// b goes back to the old answer while the new one streams.
	b.Send(map[string]any{"type": "branch.select", "requestId": "s1", "messageId": oldAnswer.ID})
	require.Equal(t, "ack", b.ReadReply("s1").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "branch.selected" && f.LeafID == oldAnswer.ID })
	require.Equal(t, []string{"q1", "a1"}, wstest.Contents(a.State.Sorted()))
	require.NotNil(t, a.State.ActiveRun, "the run goes on")
	require.NoError(t, gate.Pass(t.Context()))
	// The run's text goes on streaming on its own branch: not shown here.
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.RequestID == "r2" })
	require.Equal(t, []string{"q1", "a1"}, wstest.Contents(a.State.Sorted()))

	// Selecting its branch again shows it.
	a.Send(map[string]any{"type": "branch.select", "requestId": "s2", "messageId": streaming.ID})
	require.Equal(t, "ack", a.ReadReply("s2").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "branch.selected" && f.LeafID == streaming.ID })
	require.Equal(t, []string{"q1", "second answer"}, wstest.Contents(a.State.Sorted()), "the text so far")
	require.Equal(t, "streaming", a.State.Sorted()[1].Status)
	require.NoError(t, end.Pass(t.Context()))
	require.Equal(t, "chat.done", a.ReadTerminal().Type)
	b.Await(func(f wstest.Frame) bool { return f.Type == "chat.done" && f.RequestID == "r2" })
	require.Equal(t, []string{"q1", "second answer"}, wstest.Contents(a.State.Sorted()))
	require.Empty(t, wstest.Diff(a.State.Sorted(), b.State.Sorted()))
	e.requireConverged(a.State.SessionID, a, b)
}
