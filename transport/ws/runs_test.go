package ws_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// storedRun reads a run as the database has it, once the session's actor has stored
// what it wrote (its writes are stored behind its events).
func storedRun(t *testing.T, e *env, sessionID, requestID string) chat.Run {
	t.Helper()
	if a, ok := e.hub.Lookup(uuid.MustParse(sessionID)); ok {
		require.NoError(t, a.Flush(context.Background()))
	}
	run, err := e.store.RunByRequest(context.Background(), uuid.MustParse(sessionID), requestID)
	require.NoError(t, err)
	return run
}

func TestTwoTabsSeeEverythingAndEitherCancels(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(
		script.Text("first ", "words "),
		script.Tool("c1", "lookup", `{"q": 1}`, "result"),
		script.Text("then ", "more"),
		gate.Wait(),
		script.Text(" never sent"),
	)})
	a := e.session()
	b := e.join(a.State.SessionID)

	require.Equal(t, "ack", a.Chat("r1", "hello from tab A").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "more" })
	b.ReadToSeq(a.State.LastSeq)

	// Tab B cancels the run tab A started.
	b.Send(map[string]any{"type": "chat.cancel", "requestId": "stop"})
	ack := b.ReadReply("stop")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "cancelled", ack.Status)
	require.Equal(t, a.Seen[0].RunID, ack.RunID)

	endA, endB := a.ReadTerminal(), b.ReadTerminal()
	require.Equal(t, "chat.cancelled", endA.Type)
	require.Equal(t, "chat.cancelled", endB.Type)

	// Both tabs saw every event, the same bytes in the same order.
	require.Equal(t, len(a.Seen), len(b.Seen))
	for i := range a.Seen {
		require.Equal(t, string(a.Seen[i].Raw), string(b.Seen[i].Raw))
	}

	// The partial text is stored as cancelled, and so is the run.
	msgs := e.dbMessages(a.State.SessionID)
	last := msgs[len(msgs)-1]
	require.Equal(t, "assistant", last.Role)
	require.Equal(t, "then more", last.Content)
	require.Equal(t, "cancelled", last.Status)
	run := storedRun(t, e, a.State.SessionID, "r1")
	require.Equal(t, chat.RunCancelled, run.Status)
	require.NotNil(t, run.EndedAt)
	e.requireConverged(a.State.SessionID, a, b)

	// The gate was never passed: the agent saw its context cancelled and returned, so the
	// text after the gate never appears (goleak checks the goroutine is gone).
	require.Error(t, gate.Pass(shortCtx(t)))
}

func shortCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func TestCancelBeforeTheFirstToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Hang())})
	c := e.session()
	ack := c.Chat("r1", "hi")
	require.Equal(t, "ack", ack.Type)

	// Cancelling another run id is refused; the active one is cancelled. The nil UUID
	// names no run: it is not taken as "whatever run is active".
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "x", "runId": uuid.NewString()})
	require.Equal(t, "no_run", c.ReadReply("x").Code)
	c.SendUnchecked(map[string]any{"type": "chat.cancel", "requestId": "nil", "runId": uuid.Nil.String()})
	require.Equal(t, "bad_request", c.ReadReply("nil").Code)
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "y", "runId": ack.RunID})
	require.Equal(t, "ack", c.ReadReply("y").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.cancelled", end.Type)
	require.Equal(t, "cancelled", end.Run.Status)

	msgs := e.dbMessages(c.State.SessionID)
	require.Len(t, msgs, 1, "only the user message: no segment was ever opened")
	require.Equal(t, chat.RunCancelled, storedRun(t, e, c.State.SessionID, "r1").Status)

	// Nothing is active any more.
	c.Send(map[string]any{"type": "chat.cancel", "requestId": "z"})
	require.Equal(t, "no_run", c.ReadReply("z").Code)
}

func TestSendIsIdempotentOnRequestID(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(script.Text("one"), gate.Wait(), script.Text(" two"))})
	a := e.session()
	b := e.join(a.State.SessionID)

	first := a.Chat("r1", "hello")
	require.Equal(t, "ack", first.Type)
	require.False(t, first.Duplicate)

	// The same request again, from either tab, while it runs: the same run.
	again := b.Chat("r1", "hello")
	require.Equal(t, "ack", again.Type)
	require.True(t, again.Duplicate)
	require.Equal(t, first.RunID, again.RunID)
	require.Equal(t, "running", again.Status)

	// Another request while it runs.
	busy := b.Chat("r2", "me too")
	require.Equal(t, "error", busy.Type)
	require.Equal(t, "run_active", busy.Code)
	require.NotEmpty(t, busy.ErrorText)

	require.NoError(t, gate.Pass(testCtx(t)))
	a.ReadTerminal()

	// After it ended, a repeat still does not run it again.
	late := a.Chat("r1", "hello")
	require.True(t, late.Duplicate)
	require.Equal(t, first.RunID, late.RunID)
	require.Equal(t, "done", late.Status)

	// r2 was refused, so it can run now; while it runs, a retry of r1 is a duplicate,
	// not run_active.
	require.False(t, a.Chat("r2", "me too").Duplicate)
	old := b.Chat("r1", "hello")
	require.True(t, old.Duplicate)
	require.Equal(t, first.RunID, old.RunID)
	require.NoError(t, gate.Pass(testCtx(t)))
	a.ReadTerminal()

	users := 0
	for _, m := range e.dbMessages(a.State.SessionID) {
		if m.Role == "user" {
			users++
		}
	}
	require.Equal(t, 2, users, "one user message per request id")
	e.requireConverged(a.State.SessionID, a)
}

// Two tabs racing to send the same request: exactly one run.
func TestConcurrentDuplicateSends(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("ok"))})
	a := e.session()
	tabs := []*wstest.Client{a, e.join(a.State.SessionID), e.join(a.State.SessionID)}
	acks := make([]wstest.Frame, len(tabs))
	var wg sync.WaitGroup
	for i, tab := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tab.Send(map[string]any{"type": "chat.send", "requestId": "same", "content": "hi"})
			for {
				f, err := tab.TryRead()
				if err != nil {
					return
				}
				if f.Type == "ack" || f.Type == "error" {
					acks[i] = f
					return
				}
			}
		}()
	}
	wg.Wait()
	fresh := 0
	for _, ack := range acks {
		require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
		require.Equal(t, acks[0].RunID, ack.RunID)
		if !ack.Duplicate {
			fresh++
		}
	}
	require.Equal(t, 1, fresh)
	a.ReadTerminal()
	require.Len(t, e.dbMessages(a.State.SessionID), 2)
}

func TestAgentFailureKeepsWhatWasProduced(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		steps     []script.Step
		code, msg string
		segment   string // content of the last assistant segment; "" for none
	}{
		{"coded error", []script.Step{script.Text("partial", " answer"), script.Fail("model_error", "the model is overloaded")}, "model_error", "the model is overloaded", "partial answer"},
		{"plain error", []script.Step{script.Text("some"), script.FailPlain("connection reset")}, "agent_error", "connection reset", "some"},
		{"panic", []script.Step{script.Text("before the crash"), script.Panic("boom")}, "internal", "the agent crashed", "before the crash"},
		{"error before any text", []script.Step{script.Fail("model_error", "refused")}, "model_error", "refused", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{agent: script.New(tc.steps...)})
			c := e.session()
			require.Equal(t, "ack", c.Chat("r1", "go").Type)
			end := c.ReadTerminal()
			require.Equal(t, "chat.error", end.Type)
			require.Equal(t, "error", end.Run.Status)
			require.Equal(t, &wstest.ErrorInfo{Code: tc.code, Message: tc.msg}, end.Run.Error)

			run := storedRun(t, e, c.State.SessionID, "r1")
			require.Equal(t, chat.RunError, run.Status)
			require.Equal(t, &chat.ErrorInfo{Code: tc.code, Message: tc.msg}, run.Error)
			msgs := e.dbMessages(c.State.SessionID)
			if tc.segment == "" {
				require.Len(t, msgs, 1)
			} else {
				seg := msgs[len(msgs)-1]
				require.Equal(t, tc.segment, seg.Content)
				require.Equal(t, "error", seg.Status)
				require.Equal(t, &wstest.ErrorInfo{Code: tc.code, Message: tc.msg}, seg.Error)
			}
			e.requireConverged(c.State.SessionID, c)

			// The session is usable again.
			require.Equal(t, "ack", c.Chat("r2", "again").Type)
			c.ReadTerminal()
		})
	}
}

// An agent that returns while a tool call is still running leaves no call "running".
func TestRunEndingWithAToolStillRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.ToolStart("c1", "forgotten", `{}`), script.ToolOutput("c1", "partial"))})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "go").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	msgs := e.dbMessages(c.State.SessionID)
	tool := msgs[1]
	require.Equal(t, "error", tool.Tool.Status)
	require.Equal(t, "partial", *tool.Tool.Output)
	require.Equal(t, "tool_unfinished", tool.Error.Code)
	e.requireConverged(c.State.SessionID, c)
}

func TestHistoryPagesBackwards(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{
		agent: script.PerRun(func(req conversation.Request) []script.Step {
			if req.Content == "last" {
				return []script.Step{script.Text("open ", "segment"), gate.Wait()}
			}
			return []script.Step{script.Text("reply to " + req.Content)}
		}),
		conv: func(c *conversation.Config) { c.SnapshotMessages = 3 },
	})
	a := e.session()
	for _, m := range []string{"a", "b", "c", "d"} {
		require.Equal(t, "ack", a.Chat("r-"+m, m).Type)
		a.ReadTerminal()
	}
	require.Equal(t, "ack", a.Chat("r-last", "last").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "segment" })

	// A new tab gets the newest 3 messages and pages back through the rest.
	b := e.dial()
	snap := b.Hello(a.State.SessionID)
	require.Len(t, snap.Messages, 3)
	require.True(t, snap.HasMore)
	all := snap.Messages
	for more := true; more; {
		b.Send(map[string]any{"type": "history.fetch", "requestId": "h", "before": all[0].Position, "limit": 2})
		page := b.ReadReply("h")
		require.Equal(t, "history", page.Type, "%s", page.Raw)
		require.LessOrEqual(t, len(page.Messages), 2)
		all = append(page.Messages, all...)
		more = page.HasMore
	}
	if d := wstest.Diff(a.State.Sorted(), all); d != "" {
		t.Fatal(d)
	}
	// The open segment is in its live form.
	require.Equal(t, "open segment", all[len(all)-1].Content)
	require.Equal(t, "streaming", all[len(all)-1].Status)

	// history.fetch without before pages from the newest.
	b.Send(map[string]any{"type": "history.fetch", "requestId": "h2", "limit": 1})
	page := b.ReadReply("h2")
	require.Len(t, page.Messages, 1)
	require.Equal(t, "open segment", page.Messages[0].Content)
	require.NoError(t, gate.Pass(testCtx(t)))
	a.ReadTerminal()
}

// Agents may produce text PostgreSQL cannot store as is; what clients see must be what
// is stored.
func TestAgentTextIsMadeStorable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("nul\x00here", " bad\xffutf8", " ok"))})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "go").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	msgs := e.dbMessages(c.State.SessionID)
	require.Equal(t, "nul\uFFFDhere bad\uFFFDutf8 ok", msgs[1].Content)
	require.False(t, strings.ContainsRune(msgs[1].Content, 0))
	e.requireConverged(c.State.SessionID, c)
}
