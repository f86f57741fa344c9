package conversation_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store"
	"github.com/chatd/chatd/store/storetest"
)

// checkpointAgent records the request it is run with and plays its steps.
type checkpointAgent struct {
	mu    sync.Mutex
	reqs  []conversation.Request
	steps func(ctx context.Context, req conversation.Request, out conversation.Emitter) error
}

func (c *checkpointAgent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	if c.steps == nil {
		return nil
	}
	return c.steps(ctx, req, out)
}

func (c *checkpointAgent) requests() []conversation.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]conversation.Request(nil), c.reqs...)
}

// deadRun stores what a process that died mid-run leaves behind: the run running, a
// complete segment, a tool call still running, and an open segment with no text (text
// is stored only when a segment closes).
type deadRun struct {
	session uuid.UUID
	run     chat.Run
	user    chat.Message
	done    chat.Message // the complete segment
	tool    chat.Message // the running call
	open    chat.Message // the open, empty segment
}

func storeDeadRun(t *testing.T, st *store.Store, recoveries int) deadRun {
	t.Helper()
	ctx := testCtx(t)
	now := chat.Timestamp(time.Now())
	d := deadRun{session: uuid.New()}
	_, err := st.SessionCreate(ctx, chat.Session{ID: d.session, CreatedAt: now})
	require.NoError(t, err)
	d.run = chat.Run{ID: uuid.New(), SessionID: d.session, RequestID: "r1", Status: chat.RunRunning, StartedAt: now, LastActivityAt: now, Recoveries: recoveries}
	msg := func(pos int64, role chat.Role, status chat.MessageStatus) chat.Message {
		return chat.Message{ID: uuid.New(), SessionID: d.session, RunID: &d.run.ID, RequestID: "r1", Position: pos, Role: role, Kind: chat.KindText, Status: status, CreatedAt: now, UpdatedAt: now}
	}
	d.user = msg(1, chat.RoleUser, chat.MessageComplete)
	d.user.Content = "go"
	require.NoError(t, st.RunStart(ctx, d.run, d.user, 0))
	if recoveries > 0 {
		require.NoError(t, st.RunUpdate(ctx, d.run, chat.RunRunning))
	}
	d.done = msg(2, chat.RoleAssistant, chat.MessageStreaming)
	d.done.ParentID = &d.user.ID
	require.NoError(t, st.MessageInsert(ctx, d.done))
	d.done.Content, d.done.Status = "Looking it up. ", chat.MessageComplete
	require.NoError(t, st.MessageUpdate(ctx, d.done, chat.MessageStreaming))
	d.tool = msg(3, chat.RoleTool, chat.MessageStreaming)
	d.tool.Tool = &chat.ToolCall{CallID: "c1", Name: "lookup", Input: []byte(`{"q":"x"}`), Status: chat.ToolRunning}
	d.tool.ParentID = &d.done.ID
	require.NoError(t, st.MessageInsert(ctx, d.tool))
	d.open = msg(4, chat.RoleAssistant, chat.MessageStreaming)
	d.open.ParentID = &d.tool.ID
	require.NoError(t, st.MessageInsert(ctx, d.open))
	return d
}

func startOn(t *testing.T, st conversation.Store, agent conversation.Agent, session uuid.UUID) *conversation.Actor {
	t.Helper()
	a := conversation.Start(conversation.Config{Store: st, Agent: agent}, session, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	return a
}

// A run its process left running is continued as the same run from what it stored: the
// empty open segment goes, the agent gets the rest as its checkpoint and can end the call
// that was cut off, and its new text streams as a new segment.
func TestRecoveryContinuesFromTheCheckpoint(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	d := storeDeadRun(t, st, 0)
	gate := script.NewGate()
	agent := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if err := gate.Wait()(ctx, out); err != nil {
			return err
		}
		if err := out.ToolEnd("c1", conversation.ToolResult{Interrupted: true}); err != nil {
			return err
		}
		return out.Text("Done.")
	}}
	a := startOn(t, st, agent, d.session)
	ctx := testCtx(t)

	// As at start-up: nobody watches yet.
	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: d.run.ID, Recovery: true})
	require.NoError(t, err)
	require.Equal(t, conversation.SendResult{RunID: d.run.ID, Status: chat.RunRunning}, res)
	s := convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	snap := s.AwaitCatchUp(t, 1).Snapshot
	require.Equal(t, chat.RunRunning, snap.ActiveRun.Status)
	require.Len(t, snap.Messages, 3, "the empty open segment is gone")
	require.NoError(t, gate.Pass(ctx))
	end := s.Await(t, convtest.Terminal)
	require.Equal(t, conversation.EventChatDone, end.Type)
	require.Equal(t, d.run.ID, end.RunID, "the same run")

	reqs := agent.requests()
	require.Len(t, reqs, 1)
	require.Equal(t, "go", reqs[0].Content)
	require.Len(t, reqs[0].Checkpoint, 2, "the complete segment and the running call; the empty segment is gone")
	require.Equal(t, "Looking it up. ", reqs[0].Checkpoint[0].Content)
	require.Equal(t, chat.ToolRunning, reqs[0].Checkpoint[1].Tool.Status)

	require.NoError(t, a.Flush(ctx)) // its writes are stored behind its events
	msgs, _, err := st.MessagesBefore(ctx, d.session, 0, 100)
	require.NoError(t, err)
	require.Len(t, msgs, 4, "user, segment, call, the continuation's segment")
	require.NotEqual(t, d.open.ID, msgs[3].ID)
	require.Equal(t, d.tool.ID, msgs[2].ID)
	require.Equal(t, chat.ToolInterrupted, msgs[2].Tool.Status)
	require.Equal(t, conversation.CodeInterrupted, msgs[2].Error.Code)
	require.Equal(t, "Done.", msgs[3].Content)
	require.Greater(t, msgs[3].Position, msgs[2].Position)
	require.Empty(t, convtest.Diff(msgs, s.Messages()))

	run, err := st.RunGet(ctx, d.run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)
	require.Equal(t, 1, run.Recoveries)

	// A second recovery of a run that ended is nothing to do.
	again, err := a.Continue(ctx, conversation.ContinueRequest{RunID: d.run.ID, Recovery: true})
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Len(t, agent.requests(), 1)
}

// A run that crashed its process MaxRecoveries times is not continued again: it ends
// interrupted, and its open rows with it.
func TestCrashLoopEndsInterrupted(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	d := storeDeadRun(t, st, conversation.DefaultMaxRecoveries)
	agent := &checkpointAgent{}
	a := startOn(t, st, agent, d.session)
	ctx := testCtx(t)

	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: d.run.ID, Recovery: true})
	require.NoError(t, err)
	require.Equal(t, chat.RunInterrupted, res.Status)
	roundTrip(t, a)
	require.Empty(t, agent.requests(), "the agent never ran")

	run, err := st.RunGet(ctx, d.run.ID)
	require.NoError(t, err)
	require.Equal(t, chat.RunInterrupted, run.Status)
	require.Equal(t, conversation.DefaultMaxRecoveries+1, run.Recoveries)
	require.NotNil(t, run.EndedAt)
	require.NoError(t, a.Flush(ctx)) // its writes are stored behind its events
	msgs, _, err := st.MessagesBefore(ctx, d.session, 0, 100)
	require.NoError(t, err)
	for _, m := range msgs {
		require.NotEqual(t, chat.MessageStreaming, m.Status, "message %d still streaming", m.Position)
	}
}

// interruptedRun starts a run on a first actor that streams "part " and is then stopped
// (the server shuts down): the run ends interrupted with its text stored. It returns the
// session and the run.
func interruptedRun(t *testing.T, st *store.Store, agent conversation.Agent) (uuid.UUID, uuid.UUID) {
	t.Helper()
	session := uuid.New()
	first := conversation.Start(conversation.Config{Store: st, Agent: agent}, session, nil)
	ctx := testCtx(t)
	s := convtest.New()
	_, err := first.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	sent, err := first.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, convtest.Type(conversation.EventDelta))
	require.NoError(t, first.Stop(ctx))
	require.NoError(t, first.Wait(ctx))
	end := s.Await(t, convtest.Terminal)
	require.Equal(t, chat.RunInterrupted, end.Run.Status)
	require.True(t, end.Run.Resumable, "the terminal event says the run can be resumed")
	return session, sent.RunID
}

// A first run streams "part " and hangs until the server stops; its continuation waits
// at gate, then streams "two".
func partTwoAgent(gate *script.Gate) *checkpointAgent {
	return &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if len(req.Checkpoint) == 0 {
			if err := out.Text("part "); err != nil {
				return err
			}
			return script.Hang()(ctx, out)
		}
		if err := gate.Wait()(ctx, out); err != nil {
			return err
		}
		return out.Text("two")
	}}
}

// chat.resume's continue: a run that ended interrupted is the session's latest and
// resumable; continuing it runs the agent on its checkpoint, once per requestId; another
// resume while it runs, or of a run that completed, is refused.
func TestResumeContinuesTheSameRun(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	gate := script.NewGate()
	agent := partTwoAgent(gate)
	session, runID := interruptedRun(t, st, agent)

	a := startOn(t, st, agent, session)
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)
	snap := tab.AwaitCatchUp(t, 1).Snapshot
	require.NotNil(t, snap.LastRun)
	require.Equal(t, chat.RunInterrupted, snap.LastRun.Status)
	require.True(t, snap.LastRun.Resumable)

	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-1"})
	require.NoError(t, err)
	require.Equal(t, conversation.SendResult{RunID: runID, Status: chat.RunRunning}, res)
	status := tab.Await(t, convtest.Type(conversation.EventRunStatus))
	require.Equal(t, chat.RunRunning, status.Run.Status, "every tab sees the run active again")

	// While it runs: the same request is a duplicate, another one finds it active.
	dup, err := a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-1"})
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-2"})
	requireCode(t, err, conversation.CodeRunActive)

	require.NoError(t, gate.Pass(ctx))
	end := tab.Await(t, convtest.Terminal)
	require.Equal(t, conversation.EventChatDone, end.Type)
	require.Equal(t, runID, end.RunID)
	require.False(t, end.Run.Resumable)

	reqs := agent.requests()
	require.Len(t, reqs, 2, "the run, and one continuation")
	require.Len(t, reqs[1].Checkpoint, 1)
	require.Equal(t, "part ", reqs[1].Checkpoint[0].Content)
	require.Equal(t, chat.MessageInterrupted, reqs[1].Checkpoint[0].Status, "stored at shutdown with its text")

	require.NoError(t, a.Flush(ctx)) // its writes are stored behind its events
	msgs, _, err := st.MessagesBefore(ctx, session, 0, 100)
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	require.Equal(t, "part ", msgs[1].Content)
	require.Equal(t, "two", msgs[2].Content, "the continuation streams as a new segment")
	require.Empty(t, convtest.Diff(msgs, tab.Messages()))

	// resume-1 again after the end: still a duplicate, nothing runs. A completed run is
	// neither resumable nor dismissable.
	dup, err = a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-1"})
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-3"})
	requireCode(t, err, conversation.CodeConflict)
	_, err = a.Dismiss(ctx, runID)
	requireCode(t, err, conversation.CodeConflict)
	require.Len(t, agent.requests(), 2)
}

// chat.dismiss keeps an interrupted run as it is: every tab learns it is no longer
// resumable, a resume is refused, a second dismiss is a duplicate; and only the latest
// run can be resumed.
func TestDismissAndOnlyTheLatestRunResumes(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	agent := partTwoAgent(script.NewGate())
	session, runID := interruptedRun(t, st, agent)
	a := startOn(t, st, agent, session)
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)

	res, err := a.Dismiss(ctx, runID)
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	ev := tab.Await(t, convtest.Type(conversation.EventRunStatus))
	require.Equal(t, chat.RunInterrupted, ev.Run.Status)
	require.False(t, ev.Run.Resumable)
	require.Nil(t, tab.ActiveRun())

	again, err := a.Dismiss(ctx, runID)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: runID, RequestID: "resume-1"})
	requireCode(t, err, conversation.CodeConflict)
	late := convtest.New()
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: late})
	require.NoError(t, err)
	require.False(t, late.AwaitCatchUp(t, 1).Snapshot.LastRun.Resumable)

	// Unknown runs are not found.
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: uuid.New(), RequestID: "x"})
	requireCode(t, err, conversation.CodeNotFound)
	_, err = a.Dismiss(ctx, uuid.New())
	requireCode(t, err, conversation.CodeNotFound)
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, code, ce.Code, ce.Message)
}

// chat.resume's retry: the user message is answered again by a new run (its requestId is
// the resume's, so repeating it starts nothing); the old answer stays as another branch
// under the user message, out of the active path and the model's context; the old run is
// no longer resumable.
func TestRetryAnswersAgainAsANewRun(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	var calls int
	var mu sync.Mutex
	agent := &checkpointAgent{}
	agent.steps = func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		switch n {
		case 1:
			if err := out.Text("part "); err != nil {
				return err
			}
			return script.Hang()(ctx, out)
		case 2:
			return out.Text("second answer")
		default:
			return out.Text("ok")
		}
	}
	session, oldRun := interruptedRun(t, st, agent)
	a := startOn(t, st, agent, session)
	ctx := testCtx(t)
	tab := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: tab})
	require.NoError(t, err)

	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: oldRun, RequestID: "retry-1", Retry: true})
	require.NoError(t, err)
	require.NotEqual(t, oldRun, res.RunID, "a new run")
	end := tab.Await(t, convtest.Terminal)
	require.Equal(t, res.RunID, end.RunID)
	require.Equal(t, conversation.EventChatDone, end.Type)
	dup, err := a.Continue(ctx, conversation.ContinueRequest{RunID: oldRun, RequestID: "retry-1", Retry: true})
	require.NoError(t, err)
	require.Equal(t, conversation.SendResult{RunID: res.RunID, Duplicate: true, Status: chat.RunDone}, dup)

	reqs := agent.requests()
	require.Len(t, reqs, 2)
	require.Equal(t, "go", reqs[1].Content, "the same user message")
	require.Empty(t, reqs[1].Checkpoint)
	require.Equal(t, "retry-1", reqs[1].RequestID)

	require.NoError(t, a.Flush(ctx)) // its writes are stored behind its events
	msgs, _, err := st.MessagesBefore(ctx, session, 0, 100)
	require.NoError(t, err)
	require.Len(t, msgs, 2, "the active path: the user message and the new answer")
	require.Equal(t, "go", msgs[0].Content)
	require.Nil(t, msgs[0].Branch, "the user message has no alternative")
	require.Equal(t, "second answer", msgs[1].Content)
	require.Equal(t, msgs[0].ID, *msgs[1].ParentID)
	require.NotNil(t, msgs[1].Branch, "the new answer is the second of two")
	require.Equal(t, 1, msgs[1].Branch.Index)
	older, _, err := st.MessagesPath(ctx, session, &msgs[1].Branch.Siblings[0], 0, 100)
	require.NoError(t, err)
	require.Len(t, older, 2, "the old answer is a branch of its own")
	require.Equal(t, "part ", older[1].Content)
	require.Equal(t, 0, older[1].Branch.Index)
	var shown []uuid.UUID
	for _, m := range tab.Messages() {
		shown = append(shown, m.ID)
	}
	require.Equal(t, []uuid.UUID{msgs[0].ID, msgs[1].ID}, shown, "the tab shows the active path")
	_, err = a.Continue(ctx, conversation.ContinueRequest{RunID: oldRun, RequestID: "resume-x"})
	requireCode(t, err, conversation.CodeConflict)

	// The next run's model does not see the other branch.
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r2", Content: "and then?"})
	require.NoError(t, err)
	tab.Await(t, func(ev *conversation.Event) bool { return ev.Terminal() && ev.RequestID == "r2" })
	reqs = agent.requests()
	require.Len(t, reqs, 3)
	var seen []string
	for _, m := range reqs[2].History {
		seen = append(seen, m.Content)
	}
	require.Equal(t, []string{"go", "second answer"}, seen)
}

// Every chat.resume's requestId stays its idempotency key: a late retransmit of the
// first resume, after a second one, continues nothing.
func TestEveryResumeRequestIDIsRemembered(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	ag := &checkpointAgent{steps: func(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
		if err := out.Text("x"); err != nil {
			return err
		}
		return &conversation.Error{Code: "model_error", Message: "boom"}
	}}
	a := startOn(t, st, ag, uuid.New())
	ctx := testCtx(t)
	s := convtest.New()
	_, err := a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: s})
	require.NoError(t, err)
	sent, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	s.Await(t, convtest.Terminal)
	for _, id := range []string{"res1", "res2"} {
		res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: sent.RunID, RequestID: id})
		require.NoError(t, err)
		require.False(t, res.Duplicate)
		s.Await(t, convtest.Terminal)
	}
	res, err := a.Continue(ctx, conversation.ContinueRequest{RunID: sent.RunID, RequestID: "res1"}) // a late retransmit
	require.NoError(t, err)
	require.True(t, res.Duplicate, "res1 already continued the run once")
	require.Len(t, ag.requests(), 3)
}
