package ws_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// sendWhile sends chat.send with a whileRunning policy and returns its reply.
func sendWhile(c *wstest.Client, requestID, content, policy string) wstest.Frame {
	c.Send(map[string]any{"type": "chat.send", "requestId": requestID, "content": content, "whileRunning": policy})
	return c.ReadReply(requestID)
}

// interrupt: the active run ends cancelled (new_message) with its partial kept, the new
// message starts a run, and both tabs see the same; a repeat of the request is a
// duplicate, not a second interrupt.
func TestSendWhileRunningInterrupt(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.PerRun(func(req conversation.Request) []script.Step {
		if req.Content == "first" {
			return []script.Step{script.Text("partial ", "answer"), script.Hang()}
		}
		return []script.Step{script.Text("second answer"), gate.Wait()}
	})})
	a := e.session()
	b := e.join(a.State.SessionID)

	first := a.Chat("r1", "first")
	require.Equal(t, "ack", first.Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "answer" })
	b.ReadToSeq(a.State.LastSeq)

	// Tab B sends with interrupt: the first run is cancelled, the second starts.
	ack := sendWhile(b, "r2", "second", "interrupt")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.False(t, ack.Duplicate)
	require.Equal(t, "running", ack.Status)
	require.NotEqual(t, first.RunID, ack.RunID)

	for _, c := range []*wstest.Client{a, b} {
		end := c.ReadTerminal()
		require.Equal(t, "chat.cancelled", end.Type)
		require.Equal(t, first.RunID, end.RunID)
		require.Equal(t, "new_message", end.Run.CancelReason)
		started := c.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" })
		require.Equal(t, ack.RunID, started.RunID)
		require.Equal(t, "second", started.UserMessage.Content)
		c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "second answer" })
	}

	// The same request again is the same run, and interrupts nothing.
	again := sendWhile(a, "r2", "second", "interrupt")
	require.True(t, again.Duplicate)
	require.Equal(t, ack.RunID, again.RunID)

	require.NoError(t, gate.Pass(testCtx(t)))
	a.ReadTerminal()
	b.ReadTerminal()

	r1 := storedRun(t, e, a.State.SessionID, "r1")
	require.Equal(t, chat.RunCancelled, r1.Status)
	require.Equal(t, chat.CancelNewMessage, r1.CancelReason)
	require.Equal(t, chat.RunDone, storedRun(t, e, a.State.SessionID, "r2").Status)
	var kept bool
	for _, m := range e.dbMessages(a.State.SessionID) {
		if m.Role == "assistant" && m.Content == "partial answer" {
			require.Equal(t, "cancelled", m.Status)
			kept = true
		}
	}
	require.True(t, kept, "the interrupted run's partial is kept")
	e.requireConverged(a.State.SessionID, a, b)
}

// reject, by name or as the default, answers run_active and stores nothing; an unknown
// policy is bad_request and changes nothing.
func TestSendWhileRunningRejectAndBadPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("busy"), script.Hang())})
	a := e.session()
	b := e.join(a.State.SessionID)
	first := a.Chat("r1", "first")
	require.Equal(t, "ack", first.Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })

	require.Equal(t, "run_active", sendWhile(b, "r2", "second", "reject").Code)
	require.Equal(t, "run_active", b.Chat("r3", "third").Code, "the default is reject")
	b.SendUnchecked(map[string]any{"type": "chat.send", "requestId": "r4", "content": "x", "whileRunning": "later"})
	bad := b.ReadReply("r4")
	require.Equal(t, "bad_request", bad.Code)
	require.Contains(t, bad.ErrorText, "whileRunning")

	users := 0
	for _, m := range e.dbMessages(a.State.SessionID) {
		if m.Role == "user" {
			users++
		}
	}
	require.Equal(t, 1, users, "nothing refused was stored")

	// The refused requests may run later: their ids were not taken.
	b.Send(map[string]any{"type": "chat.cancel", "requestId": "stop"})
	require.Equal(t, "ack", b.ReadReply("stop").Type)
	b.ReadTerminal()
	a.ReadTerminal()
	require.False(t, b.Chat("r2", "second").Duplicate)
	b.Send(map[string]any{"type": "chat.cancel", "requestId": "stop2"})
	require.Equal(t, "ack", b.ReadReply("stop2").Type)
}

// CHATD_DOUBLE_TEXT=interrupt makes a send that names no policy interrupt.
func TestSendWhileRunningDefaultInterrupt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		agent: script.New(script.Text("busy"), script.Hang()),
		conv:  func(c *conversation.Config) { c.DoubleText = chat.DoubleTextInterrupt },
	})
	a := e.session()
	require.Equal(t, "ack", a.Chat("r1", "first").Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	ack := a.Chat("r2", "second")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "run_active", sendWhile(a, "r3", "third", "reject").Code, "a send's own policy wins")
	a.Send(map[string]any{"type": "chat.cancel", "requestId": "stop"})
	require.Equal(t, "ack", a.ReadReply("stop").Type)
}

// queue: the message is stored at once and shown in every tab (queue.updated, and the
// snapshot of a tab that comes later); repeats are duplicates; a queued message can be
// taken back; over the bound is queue_full; when the run ends the queued messages start
// their runs one after the other, in order.
func TestSendWhileRunningQueue(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{
		agent: script.PerRun(func(req conversation.Request) []script.Step {
			return []script.Step{script.Text("re: " + req.Content), gate.Wait()}
		}),
		conv: func(c *conversation.Config) { c.MaxQueued = 2 },
	})
	a := e.session()
	b := e.join(a.State.SessionID)
	first := a.Chat("r1", "first")
	require.Equal(t, "ack", first.Type)
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })

	q2 := sendWhile(b, "r2", "second", "queue")
	require.Equal(t, "ack", q2.Type, "%s", q2.Raw)
	require.Equal(t, "queued", q2.Status)
	require.Empty(t, q2.RunID, "a queued message has no run yet")
	require.False(t, q2.Duplicate)
	require.Equal(t, "queued", sendWhile(a, "r3", "third", "queue").Status)
	again := sendWhile(a, "r2", "second", "reject")
	require.True(t, again.Duplicate, "a repeat of a queued message is a duplicate, whatever its policy")
	require.Equal(t, "queued", again.Status)

	isQueue := func(ids ...string) func(wstest.Frame) bool {
		return func(f wstest.Frame) bool {
			if f.Type != "queue.updated" || len(f.Queued) != len(ids) {
				return false
			}
			for i, q := range f.Queued {
				if q.RequestID != ids[i] || q.Status != "queued" {
					return false
				}
			}
			return true
		}
	}
	for _, c := range []*wstest.Client{a, b} {
		c.Await(isQueue("r2", "r3"))
	}
	// Over the bound.
	full := sendWhile(b, "r4", "fourth", "queue")
	require.Equal(t, "queue_full", full.Code, "%s", full.Raw)

	// A tab that comes now sees the queue in its snapshot.
	c := e.join(a.State.SessionID)
	require.Len(t, c.State.Queued, 2)
	require.Equal(t, "second", c.State.Queued[0].Content)

	// Taking r3 back, from the other tab; twice is not_found.
	b.Send(map[string]any{"type": "chat.unqueue", "requestId": "r3"})
	require.Equal(t, "ack", b.ReadReply("r3").Type)
	b.Send(map[string]any{"type": "chat.unqueue", "requestId": "r3"})
	require.Equal(t, "not_found", b.ReadReply("r3").Code)
	for _, cl := range []*wstest.Client{a, b} {
		cl.Await(isQueue("r2"))
	}
	require.Equal(t, "queued", sendWhile(b, "r4", "fourth", "queue").Status)
	a.Await(isQueue("r2", "r4"))

	// The run ends: r2 starts, then r4, in order, each once the one before ended.
	require.NoError(t, gate.Pass(testCtx(t)))
	started := a.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" && f.RequestID == "r2" })
	require.Equal(t, "second", started.UserMessage.Content)
	a.Await(isQueue("r4"))
	require.NoError(t, gate.Pass(testCtx(t)))
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.started" && f.RequestID == "r4" })
	a.Await(isQueue())
	require.NoError(t, gate.Pass(testCtx(t)))
	a.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r4" })
	b.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r4" })
	c.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r4" })

	var users []string
	for _, m := range e.dbMessages(a.State.SessionID) {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	require.Equal(t, []string{"first", "second", "fourth"}, users, "r3 was taken back, r1 ran once")
	for _, id := range []string{"r1", "r2", "r4"} {
		require.Equal(t, chat.RunDone, storedRun(t, e, a.State.SessionID, id).Status)
	}
	e.requireConverged(a.State.SessionID, a, b, c)
	// A repeat after its run ended is the run's duplicate.
	late := a.Chat("r2", "second")
	require.True(t, late.Duplicate)
	require.Equal(t, started.RunID, late.RunID)
}
