package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/tools"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/transport/wstest"
)

// sandboxHarness is a harness whose loop has the shell tool and local session sandboxes.
func sandboxHarness(t *testing.T, model agent.Model, edit ...func(*agent.Config)) (*harness, *local.Provider) {
	t.Helper()
	return sandboxHarnessConv(t, model, nil, edit...)
}

// sandboxHarnessConv is sandboxHarness with a hook on the actor's config.
func sandboxHarnessConv(t *testing.T, model agent.Model, convEdit func(*conversation.Config), edit ...func(*agent.Config)) (*harness, *local.Provider) {
	t.Helper()
	p, err := local.New(t.TempDir())
	require.NoError(t, err)
	var sbs *agent.Sandboxes
	h := newHarnessConv(t, model, func(st *store.Store, c *agent.Config) {
		sbs = agent.NewSandboxes(p, st, c.Clock)
		c.Sandboxes = sbs
	}, convEdit, append([]func(*agent.Config){withTools(tools.Shell{})}, edit...)...)
	h.sbs = sbs
	t.Cleanup(func() {
		// Nothing may outlive the test: kill whatever sandbox the session has.
		if id, err := h.st.SessionSandbox(context.Background(), h.actor.SessionID()); err == nil && id != "" {
			_ = p.Kill(context.Background(), id)
		}
	})
	return h, p
}

func shellCall(id, command string) agent.ModelEvent {
	in, _ := json.Marshal(map[string]string{"command": command})
	return modeltest.Call(id, "shell", string(in))
}

// awaitStatus waits for the run to reach status.
func (h *harness) awaitStatus(status string) wstest.Frame {
	h.t.Helper()
	return h.sub.Await(h.t, func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == status })
}

func (h *harness) decide(callID string, approve bool) conversation.DecideResult {
	h.t.Helper()
	res, err := h.actor.Decide(context.Background(), uuid.Nil, callID, approve)
	require.NoError(h.t, err)
	return res
}

func (h *harness) sandboxID() string {
	h.t.Helper()
	id, err := h.st.SessionSandbox(context.Background(), h.actor.SessionID())
	require.NoError(h.t, err)
	return id
}

func (h *harness) runStatus() chat.RunStatus {
	h.t.Helper()
	run := h.sub.ActiveRun()
	require.NotNil(h.t, run)
	require.NoError(h.t, h.actor.Flush(context.Background())) // its writes are stored behind its events
	stored, err := h.st.RunGet(context.Background(), uuid.MustParse(run.RunID))
	require.NoError(h.t, err)
	return stored.Status
}

// poll waits on a ticker for a condition about real processes (they offer no event).
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// pollOr is poll with a description of the situation when it times out.
func pollOr(t *testing.T, what string, cond func() bool, describe func() string) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s: %s", what, describe())
		}
	}
}

// groupStates describes the processes in pid's process group.
func groupStates(pid int) string {
	pgid, err := syscall.Getpgid(pid)
	if err != nil {
		return err.Error()
	}
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(p); err == nil && g == pgid {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			out = append(out, e.Name()+"="+procState(p)+"("+strings.ReplaceAll(string(b), "\x00", " ")+")")
		}
	}
	return "pgid " + strconv.Itoa(pgid) + ": " + strings.Join(out, ", ")
}

func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	poll(t, path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	return pid
}

// ticker is a shell command that leaves a process in the sandbox's background, writing
// the time to a file every 10ms, and saves its pid.
// (written to a temporary file and renamed, so a reader never sees it empty).
const ticker = `(while :; do date +%s%N > tick.tmp; mv tick.tmp tick; sleep 0.01; done) > /dev/null 2>&1 & echo $! > bgpid; echo started`

// A shell call waits for approval; after the timeout the session's sandbox is paused and
// the run shows paused; the decision resumes the sandbox and the call runs.
func TestApprovalTimeoutPausesTheSandboxAndTheDecisionResumesIt(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", ticker)}},
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "cat tick")}},
		modeltest.Say("The ticker is running."),
	)
	h, p := sandboxHarness(t, model)
	h.send("start a ticker, then read it")

	// The first call waits, then runs once approved, and leaves the ticker behind.
	st := h.awaitStatus("awaiting_approval")
	require.Equal(t, "s1", st.Run.PendingApproval.ToolCallID)
	require.Equal(t, chat.RunAwaitingApproval, h.runStatus())
	require.Equal(t, chat.RunRunning, h.decide("s1", true).Status)
	end1 := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	require.Equal(t, "ok", end1.Message.Tool.Status, "%s", *end1.Message.Tool.Output)
	ws := p.Workspace(h.sandboxID())
	bg := readPID(t, filepath.Join(ws, "bgpid"))
	poll(t, "the ticker's first tick", func() bool { _, err := os.Stat(filepath.Join(ws, "tick")); return err == nil })

	// The second call waits; nobody decides within the approval timeout.
	st = h.awaitStatus("awaiting_approval")
	require.Equal(t, "s2", st.Run.PendingApproval.ToolCallID)
	h.waitTimers(1) // the approval timeout
	h.clock.Advance(agent.DefaultApprovalTimeout)
	paused := h.awaitStatus("paused")
	require.Equal(t, "s2", paused.Run.PendingApproval.ToolCallID, "a paused run still shows what it waits for")
	require.Equal(t, chat.RunPaused, h.runStatus())
	// Stopped: T, or D for a shell waiting in vfork on a child the signal stopped
	// before its exec. Either way it makes no progress.
	pollOr(t, "the sandbox's ticker to be stopped", func() bool { s := procState(bg); return s == "T" || s == "D" }, func() string {
		return "ticker " + strconv.Itoa(bg) + " state " + procState(bg) + "; group: " + groupStates(bg)
	})
	frozen, _ := os.ReadFile(filepath.Join(ws, "tick"))
	tick := time.NewTicker(20 * time.Millisecond)
	for range 5 {
		<-tick.C
		now, _ := os.ReadFile(filepath.Join(ws, "tick"))
		require.Equal(t, string(frozen), string(now), "the paused ticker made progress")
	}
	tick.Stop()

	// The decision resumes the sandbox first, then the call runs.
	require.Equal(t, chat.RunRunning, h.decide("s2", true).Status)
	end2 := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	require.Equal(t, "ok", end2.Message.Tool.Status, "%s", *end2.Message.Tool.Output)
	poll(t, "the ticker to run again", func() bool {
		now, _ := os.ReadFile(filepath.Join(ws, "tick"))
		return string(now) != string(frozen)
	})
	require.Equal(t, "chat.done", h.end().Type)

	msgs := h.stored()
	require.Len(t, msgs, 4)
	require.Contains(t, *msgs[1].Tool.Output, "started")
	require.Regexp(t, `^\d+\n`, *msgs[2].Tool.Output)
	require.Equal(t, "The ticker is running.", msgs[3].Content)
}

// A sandbox paused for longer than its limit is killed by the janitor, counting from the
// pause the approval timeout stored; the run still waits, and the approval that finally
// comes gets a new sandbox, which the transcript announces. The killed sandbox's
// workspace goes once the retention has passed.
func TestPausedTooLongTheSandboxIsKilledAndReplaced(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", ticker+"; echo old > marker")}},
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "ls")}},
		modeltest.Say("Listed."),
	)
	h, p := sandboxHarness(t, model)
	j, err := agent.NewJanitor(agent.JanitorConfig{Sandboxes: h.sbs, Store: h.st, Clock: h.clock})
	require.NoError(t, err)
	h.send("go")
	h.awaitStatus("awaiting_approval")
	h.decide("s1", true)
	h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	first := h.sandboxID()
	bg := readPID(t, filepath.Join(p.Workspace(first), "bgpid"))

	h.awaitStatus("awaiting_approval")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultApprovalTimeout)
	h.awaitStatus("paused")
	// Not yet: the kill limit counts from the pause, not from the wait.
	h.clock.Advance(agent.DefaultSandboxKillAfter - time.Second)
	pass, err := j.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, agent.JanitorPass{}, pass)
	require.Equal(t, first, h.sandboxID())
	h.clock.Advance(time.Second)
	pass, err = j.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, agent.JanitorPass{Killed: 1}, pass)
	poll(t, "the killed sandbox's ticker to be gone", func() bool { s := procState(bg); return s == "" || s == "Z" })
	require.Empty(t, h.sandboxID(), "the session forgot the killed sandbox")
	require.Equal(t, chat.RunPaused, h.runStatus(), "the run waits on, however long")

	h.decide("s2", true)
	notice := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "message.added" })
	require.Equal(t, "system", notice.Message.Role)
	require.Equal(t, "complete", notice.Message.Status)
	require.Contains(t, notice.Message.Content, "stopped after it sat idle")
	end := h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	require.Equal(t, "ok", end.Message.Tool.Status)
	require.NotContains(t, *end.Message.Tool.Output, "marker", "a new sandbox starts empty")
	require.Equal(t, "chat.done", h.end().Type)
	second := h.sandboxID()
	require.NotEqual(t, first, second)
	require.FileExists(t, filepath.Join(p.Workspace(first), "marker"), "a killed sandbox keeps its directory for the retention")
	// Once the retention has passed, a pass removes it (and pauses the new one, idle).
	h.clock.Advance(agent.DefaultWorkspaceRetention)
	pass, err = j.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, agent.JanitorPass{Paused: 1, Removed: 1}, pass)
	require.NoDirExists(t, filepath.Dir(p.Workspace(first)))
	require.DirExists(t, p.Workspace(second), "the live sandbox's workspace stays")
	msgs := h.stored()
	var system []string
	for _, m := range msgs {
		if m.Role == "system" {
			system = append(system, m.Content)
		}
	}
	require.Len(t, system, 1, "the transcript says the sandbox is new, once: %q", system)
	require.True(t, strings.HasPrefix(system[0], strings.TrimSuffix(agent.ReplacedIdle.Notice(), ".")+". They were: "), "%q", system[0])
	require.Contains(t, system[0], " marker (4 B)", "and names the files it had")
}

// Denied: the call ends denied, the model is told, and it carries on.
func TestDeniedCallIsReportedToTheModel(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", "rm -rf ~")}},
		modeltest.Say("OK, I will leave it."),
	)
	h, _ := sandboxHarness(t, model)
	h.send("clean up")
	h.awaitStatus("awaiting_approval")
	require.Equal(t, chat.RunRunning, h.decide("s1", false).Status)
	require.Equal(t, "chat.done", h.end().Type)

	msgs := h.stored()
	require.Equal(t, "denied", msgs[1].Tool.Status)
	reqs := model.Requests()
	require.Len(t, reqs, 2)
	result := reqs[1].Messages[2]
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "s1", ToolName: "shell", Result: conversation.DeclinedOutput, IsError: true}, result)
	require.Empty(t, h.sandboxID(), "nothing ran, so no sandbox was made")
}

// Cancelling while a command runs kills it: the child process is gone.
func TestCancelDuringARunningTool(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", "echo $$ > pid; sleep 1000")}})
	h, p := sandboxHarness(t, model)
	h.send("wait forever")
	h.awaitStatus("awaiting_approval")
	h.decide("s1", true)
	var id string
	poll(t, "the tool to create the session's sandbox", func() bool { id = h.sandboxID(); return id != "" })
	pid := readPID(t, filepath.Join(p.Workspace(id), "pid"))

	res, err := h.actor.Cancel(context.Background(), uuid.Nil)
	require.NoError(t, err)
	require.Equal(t, chat.RunCancelled, res.Status)
	end := h.end()
	require.Equal(t, "chat.cancelled", end.Type)
	poll(t, "the command's process to be gone", func() bool { s := procState(pid); return s == "" || s == "Z" })
	msgs := h.stored()
	require.Equal(t, "cancelled", msgs[1].Tool.Status)
}

// Cancelling while the run waits for a decision ends the call and the run cancelled.
func TestCancelDuringTheApprovalWait(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", "true")}})
	h, _ := sandboxHarness(t, model)
	h.send("go")
	h.awaitStatus("awaiting_approval")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultApprovalTimeout)
	h.awaitStatus("paused")
	_, err := h.actor.Cancel(context.Background(), uuid.Nil)
	require.NoError(t, err)
	end := h.end()
	require.Equal(t, "chat.cancelled", end.Type)
	require.Equal(t, "user", end.Run.CancelReason)
	msgs := h.stored()
	require.Equal(t, "cancelled", msgs[1].Tool.Status)
	require.Equal(t, "cancelled", msgs[1].Status)
	_, err = h.actor.Decide(context.Background(), uuid.Nil, "s1", true)
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, conversation.CodeConflict, ce.Code, "the call's run has ended")
}

// A session keeps its sandbox: a later run of the session finds what an earlier one left.
func TestLaterRunsReuseTheSessionsSandbox(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", "echo remembered > note")}},
		modeltest.Say("Saved."),
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "cat note")}},
		modeltest.Say("Read."),
	)
	h, _ := sandboxHarness(t, model)
	h.send("save a note")
	h.awaitStatus("awaiting_approval")
	h.decide("s1", true)
	require.Equal(t, "chat.done", h.end().Type)
	first := h.sandboxID()
	require.NotEmpty(t, first)

	h.send("read the note")
	h.awaitStatus("awaiting_approval")
	h.decide("s2", true)
	require.Equal(t, "chat.done", h.end().Type)
	require.Equal(t, first, h.sandboxID())
	msgs := h.stored()
	require.Equal(t, "remembered\n\n[exit code 0]", *msgs[len(msgs)-2].Tool.Output)
}

// Several calls of one step start in parallel on a session with no sandbox yet: they must
// share one sandbox, not create one each.
func TestParallelCallsShareOneNewSandbox(t *testing.T) {
	t.Parallel()
	var calls []agent.ModelEvent
	for _, id := range []string{"a", "b", "c", "d"} {
		calls = append(calls, shellCall(id, "pwd"))
	}
	model := modeltest.New(modeltest.Turn{Events: calls}, modeltest.Say("done"))
	h, p := sandboxHarness(t, model)
	h.send("where am I?")
	for _, id := range []string{"a", "b", "c", "d"} {
		h.sub.Await(t, func(f wstest.Frame) bool {
			return f.Type == "run.status" && f.Run.PendingApproval != nil && f.Run.PendingApproval.ToolCallID == id
		})
		h.decide(id, true)
	}
	require.Equal(t, "chat.done", h.end().Type)
	want := p.Workspace(h.sandboxID()) + "\n\n[exit code 0]"
	for _, m := range h.stored()[1:5] {
		require.Equal(t, want, *m.Tool.Output, "call %s ran in another sandbox", m.Tool.CallID)
	}
}

// Several approvals in one step: pendingApproval names the oldest waiting call, the run
// waits until the last decision, then runs.
func TestSeveralApprovalsInOneStep(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("a", "echo a"), shellCall("b", "echo b")}},
		modeltest.Say("both done"),
	)
	h, _ := sandboxHarness(t, model)
	h.send("two things")
	first := h.sub.Await(t, func(f wstest.Frame) bool {
		return f.Type == "run.status" && f.Run.PendingApproval != nil && f.Run.PendingApproval.ToolCallID == "a"
	})
	require.Equal(t, "awaiting_approval", first.Run.Status)
	// Both calls are announced before the run waits on them.
	h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.start" && f.Message.Tool.CallID == "b" })
	require.Equal(t, chat.RunAwaitingApproval, h.decide("a", true).Status, "b still waits")
	next := h.awaitStatus("awaiting_approval")
	require.Equal(t, "b", next.Run.PendingApproval.ToolCallID)
	require.Equal(t, chat.RunRunning, h.decide("b", false).Status)
	require.Equal(t, "chat.done", h.end().Type)
	msgs := h.stored()
	require.Equal(t, "ok", msgs[1].Tool.Status)
	require.Equal(t, "denied", msgs[2].Tool.Status)
}

// A run that ends while its sandbox is paused does not leave the sandbox frozen.
func TestCancelWhilePausedResumesTheSandbox(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", ticker)}},
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "true")}},
	)
	h, p := sandboxHarness(t, model)
	h.send("go")
	h.awaitStatus("awaiting_approval")
	h.decide("s1", true)
	h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	ws := p.Workspace(h.sandboxID())
	bg := readPID(t, filepath.Join(ws, "bgpid"))
	poll(t, "the first tick", func() bool { _, err := os.Stat(filepath.Join(ws, "tick")); return err == nil })
	h.awaitStatus("awaiting_approval")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultApprovalTimeout)
	h.awaitStatus("paused")
	poll(t, "the ticker to be stopped", func() bool { s := procState(bg); return s == "T" || s == "D" })
	frozen, _ := os.ReadFile(filepath.Join(ws, "tick"))

	_, err := h.actor.Cancel(context.Background(), uuid.Nil)
	require.NoError(t, err)
	require.Equal(t, "chat.cancelled", h.end().Type)
	poll(t, "the ticker to run again after the run ended", func() bool {
		now, _ := os.ReadFile(filepath.Join(ws, "tick"))
		return string(now) != string(frozen)
	})
}

// A run suspended while its sandbox is paused for the approval timeout (a shutdown, or
// its actor let go) still waits: its sandbox stays paused for the janitor, not resumed
// as for a run that ended.
func TestSuspendWhilePausedKeepsTheSandboxPaused(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s1", ticker)}},
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("s2", "true")}},
	)
	h, p := sandboxHarnessConv(t, model, func(c *conversation.Config) { c.SuspendOnStop = true })
	h.send("go")
	h.awaitStatus("awaiting_approval")
	h.decide("s1", true)
	h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.end" })
	ws := p.Workspace(h.sandboxID())
	bg := readPID(t, filepath.Join(ws, "bgpid"))
	poll(t, "the first tick", func() bool { _, err := os.Stat(filepath.Join(ws, "tick")); return err == nil })
	h.awaitStatus("awaiting_approval")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultApprovalTimeout)
	h.awaitStatus("paused")
	poll(t, "the ticker to be stopped", func() bool { s := procState(bg); return s == "T" || s == "D" })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, h.actor.Stop(ctx)) // suspends the run
	require.NoError(t, h.actor.Wait(ctx)) // and its agent has returned
	s := procState(bg)
	require.True(t, s == "T" || s == "D", "still frozen (state %s): the run waits", s)
	var status string
	require.NoError(t, h.st.Pool().QueryRow(ctx, "SELECT status FROM runs WHERE ended_at IS NULL").Scan(&status),
		"the run is unfinished, for the next process")
	require.Equal(t, chat.RunPaused, chat.RunStatus(status))
}

// blockingStore lets a test hold the loop inside a sandbox operation.
type blockingStore struct {
	*store.Store
	block   atomic.Pointer[chan struct{}] // while set, SessionSandbox waits on it
	entered chan struct{}
}

func (b *blockingStore) SessionSandbox(ctx context.Context, id uuid.UUID) (string, error) {
	if ch := b.block.Swap(nil); ch != nil {
		b.entered <- struct{}{}
		<-*ch
	}
	return b.Store.SessionSandbox(ctx, id)
}

// A decision that races the pause (it arrives while the loop is pausing the sandbox) must
// not leave the run shown paused while its sandbox runs.
func TestDecisionRacingThePause(t *testing.T) {
	t.Parallel()
	p, err := local.New(t.TempDir())
	require.NoError(t, err)
	var bs *blockingStore
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{shellCall("a", "echo a"), shellCall("b", "echo b")}},
		modeltest.Say("done"),
	)
	h := newHarnessWithStore(t, model, func(st *store.Store, c *agent.Config) {
		bs = &blockingStore{Store: st, entered: make(chan struct{})}
		c.Sandboxes = agent.NewSandboxes(p, bs, c.Clock)
	}, withTools(tools.Shell{}))
	h.send("two")
	h.sub.Await(t, func(f wstest.Frame) bool { return f.Type == "tool.start" && f.Message.Tool.CallID == "b" })
	h.waitTimers(1)
	release := make(chan struct{})
	bs.block.Store(&release)
	h.clock.Advance(agent.DefaultApprovalTimeout)
	<-bs.entered // the loop is inside Pause
	require.Equal(t, chat.RunAwaitingApproval, h.decide("a", true).Status)
	close(release)

	// The loop finishes pausing (paused), then sees the decision, resumes the sandbox and
	// says so: the run waits for b again, not paused.
	h.awaitStatus("paused")
	again := h.awaitStatus("awaiting_approval")
	require.Equal(t, "b", again.Run.PendingApproval.ToolCallID)
	require.Equal(t, chat.RunAwaitingApproval, h.runStatus())
	h.decide("b", true)
	require.Equal(t, "chat.done", h.end().Type)
}
