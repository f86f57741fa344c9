package server

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

// kill -9 while a tool streams its output: the output so far is in the stream log, so
// the next process shows it (the snapshot of a tab that comes back, then the stored
// tool message, which ends interrupted with it: the call's effects are unknown) and the
// model is told. What was kept is a prefix of what the tab saw, at most an interval
// (CHATD_STREAM_SYNC) short of it.
func TestKillMidToolKeepsTheOutputSoFar(t *testing.T) {
	const interval = 50 * time.Millisecond
	model := agenttest.NewToolCaller(t)
	dbURL := storetest.NewURL(t)
	st := openStore(t, dbURL)
	env := toolCallerEnv(model, "")
	env["DATABASE_URL"], env["CHATD_RECOVER"], env["CHATD_STREAM_SYNC"] = dbURL, "continue", interval.String()
	env["CHATD_SHELL_TOOL"], env["CHATD_SANDBOX"], env["CHATD_SANDBOX_DIR"] = "on", "local", t.TempDir()
	proc := startChild(t, "chatd", env)
	c := wstest.Dial(t, proc.wsURL(), nil)
	session := c.Hello("").SessionID
	ack := c.Chat("t1", `call shell {"command":"for i in $(seq 1 400); do echo line$i; sleep 0.02; done"}`)
	waiting := c.Await(func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == "awaiting_approval" })
	pa := waiting.Run.PendingApproval
	c.Send(map[string]any{"type": "tool.decide", "requestId": "d1", "runId": ack.RunID, "toolCallId": pa.ToolCallID, "decision": "approve", "inputHash": pa.InputHash})
	var tool string
	var pieces []received
	for seen := ""; !strings.Contains(seen, "line30\n"); {
		f := c.Read()
		require.False(t, f.Terminal(), "the run ended before the crash: %s", f.Raw)
		if f.Type == "tool.output" {
			tool = f.MessageID
			pieces = append(pieces, received{time.Now(), *f.Text})
			seen += *f.Text
		}
	}
	killed := time.Now()
	proc.signal(syscall.SIGKILL)
	proc.wait(15 * time.Second)

	proc = restartChild(t, proc, "chatd (after kill -9)", env)
	back := wstest.Dial(t, proc.wsURL(), nil)
	snap := back.Hello(session)
	var shown string
	for _, m := range back.State.Sorted() {
		if m.ID == tool && m.Tool != nil && m.Tool.Output != nil {
			shown = *m.Tool.Output
		}
	}
	require.NotEmpty(t, shown, "the tab that came back sees the output so far: %s", snap.Raw)
	requireLogged(t, pieces, shown, killed, interval)
	// More follows if the run is active, or was when the tab got its snapshot: a run that
	// ended after the snapshot but before this look at the database still sent the tab
	// its last frames.
	if snap.ActiveRun != nil || getRun(t, st, ack.RunID).Status.Active() {
		end := back.ReadTerminal()
		require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
	}
	stored := sessionMessages(t, st, session)
	var call *chat.Message
	for i := range stored {
		if stored[i].ID == uuid.MustParse(tool) {
			call = &stored[i]
		}
	}
	require.NotNil(t, call)
	require.Equal(t, chat.ToolInterrupted, call.Tool.Status, "a shell call cut off by a crash is not run again")
	require.True(t, strings.HasPrefix(deref(call.Tool.Output), strings.TrimRight(shown, "\n")) || strings.HasPrefix(shown, deref(call.Tool.Output)),
		"the stored output %q is what the log held, %q", deref(call.Tool.Output), shown)
	requireLogged(t, pieces, deref(call.Tool.Output), killed, interval)
	require.Contains(t, replyText(stored, ack.RunID), "Its output until then:\nline1\nline2\n", "the model was told the output so far")
	require.Empty(t, wstest.Diff(toWire(t, stored), back.State.Sorted()), "the tab equals the database")
}
