package ws_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

func reportProgress(step, of int, label string) script.Step {
	return func(_ context.Context, out conversation.Emitter) error { return out.Progress(step, of, label) }
}

func hasProgress(step int) func(wstest.Frame) bool {
	return func(f wstest.Frame) bool {
		return f.Type == "run.status" && f.Run.Progress != nil && f.Run.Progress.Step == step
	}
}

// A run's progress reaches every tab live (run.status, checked against the schema by
// wstest), a tab that joins late has it in its snapshot's activeRun, a tab that
// reconnects gets it in its replay, and the run's end keeps the last one.
func TestProgressReachesEveryTab(t *testing.T) {
	t.Parallel()
	gate, gate2 := script.NewGate(), script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(
		script.Text("reading "),
		reportProgress(1, 7, "pages"),
		gate.Wait(),
		reportProgress(2, 7, "pages"),
		gate2.Wait(),
		script.Text("done"),
	)})
	a := e.session()
	b := e.join(a.State.SessionID)
	require.Equal(t, "ack", a.Chat("r1", "read the 7 pages").Type)
	want1 := &wstest.Progress{Step: 1, Of: 7, Label: "pages"}
	for _, c := range []*wstest.Client{a, b} {
		c.Await(hasProgress(1))
		require.Equal(t, want1, c.State.ActiveRun.Progress)
	}

	late := e.join(a.State.SessionID)
	require.NotNil(t, late.State.ActiveRun)
	require.Equal(t, want1, late.State.ActiveRun.Progress, "the snapshot's active run has it")

	// b drops; the next report comes while it is away; its reconnect replays it.
	b.WS.CloseNow()
	require.NoError(t, gate.Pass(context.Background()))
	a.Await(hasProgress(2))
	b2, f := b.Resume(e.URL, nil)
	require.Equal(t, "resumed", f.Type)
	b2.Await(hasProgress(2))

	require.NoError(t, gate2.Pass(context.Background()))
	want2 := &wstest.Progress{Step: 2, Of: 7, Label: "pages"}
	for _, c := range []*wstest.Client{a, b2, late} {
		end := c.ReadTerminal()
		require.Equal(t, "chat.done", end.Type)
		require.Equal(t, want2, end.Run.Progress, "the ended run keeps its last progress")
	}

	// A tab that opens the session afterwards sees it on the last run.
	after := e.join(a.State.SessionID)
	require.NotNil(t, after.State.LastRun)
	require.Equal(t, want2, after.State.LastRun.Progress)
}
