package conversation

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// The stored transcript of a run is its checkpoint: any process can continue the run
// from it, as the same run. This file holds the two ways a run is continued (recovery of
// a run whose process died, and chat.resume's continue) and chat.dismiss.

// ContinueRequest asks the actor to continue a run from its checkpoint.
type ContinueRequest struct {
	RunID uuid.UUID
	// Recovery: the run's process died with the run unfinished (start-up found it). A
	// run that was streaming counts a recovery; after Config.MaxRecoveries it ends
	// interrupted instead.
	Recovery bool
	// RequestID is the chat.resume's idempotency key ("" for a recovery): a second
	// resume with it continues nothing and answers the run as it is.
	RequestID string
	// Retry answers the run's user message again as a new run (whose requestId is
	// RequestID) instead of continuing it: the new answer is a branch beside the run's,
	// and the active path from then on.
	Retry bool
	// Regenerate lets Retry answer again any run of the session that has ended, on any
	// branch (chat.regenerate, the AI SDK's regenerate-message); chat.resume retries
	// only the latest run, when it is resumable.
	Regenerate bool
}

// Continue continues run req.RunID from what it stored. For a recovery the run must be
// unfinished; for a resume it must be the session's latest run, ended interrupted, error
// or cancelled, and not dismissed. Errors are *Error: CodeNotFound for an unknown run,
// CodeRunActive when another run is active, CodeConflict for a run that cannot be
// continued, CodeStorage when the database fails.
func (a *Actor) Continue(ctx context.Context, req ContinueRequest) (SendResult, error) {
	return call(ctx, a, func(r chan result[SendResult]) intent { return &continueIntent{req, r} })
}

// Dismiss keeps the session's latest run, ended interrupted, error or cancelled, as it
// is: it is no longer resumable. Dismissing a dismissed run is a duplicate. Errors are
// *Error: CodeNotFound, CodeConflict for a run that is not the latest ended one,
// CodeStorage.
func (a *Actor) Dismiss(ctx context.Context, runID uuid.UUID) (SendResult, error) {
	return call(ctx, a, func(r chan result[SendResult]) intent { return &dismissIntent{runID, r} })
}

type (
	continueIntent struct {
		req   ContinueRequest
		reply chan result[SendResult]
	}
	dismissIntent struct {
		runID uuid.UUID
		reply chan result[SendResult]
	}
)

// resumableStatuses are the statuses of an ended run that chat.resume continues.
var resumableStatuses = []chat.RunStatus{chat.RunInterrupted, chat.RunError, chat.RunCancelled}

// WithResumable sets r.Resumable for r, the session's latest run: whether chat.resume
// would continue it.
func WithResumable(r chat.Run) chat.Run { return withResumable(r) }

// withResumable sets r.Resumable for r, the session's latest run.
func withResumable(r chat.Run) chat.Run {
	r.Resumable = r.DismissedAt == nil && slices.Contains(resumableStatuses, r.Status)
	return r
}

// latestEnded returns the session's latest run when it has ended, for snapshots: nil when
// there is none or it is active (it is the snapshot's activeRun then).
func (a *Actor) latestEnded() (*chat.Run, error) {
	if a.run != nil {
		return nil, nil
	}
	r, err := a.journal.latestRun()
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil || r.Status.Active() {
		return nil, err
	}
	r = withResumable(r)
	return &r, nil
}

func (a *Actor) continueRun(req ContinueRequest) (SendResult, error) {
	if req.Retry {
		return a.retryRun(req)
	}
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}
	if err := a.live(); err != nil {
		return SendResult{}, err
	}
	if a.run != nil {
		info := a.run.info
		if info.ID == req.RunID && (req.Recovery || (req.RequestID != "" && slices.Contains(info.ResumeRequestIDs, req.RequestID))) {
			return SendResult{RunID: info.ID, Duplicate: true, Status: info.Status}, nil
		}
		return SendResult{}, errorf(CodeRunActive, "run %s is still active in this session", info.ID)
	}
	run, err := a.journal.runGet(req.RunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.SessionID != a.id) {
		return SendResult{}, errorf(CodeNotFound, "run %s does not exist in this session", req.RunID)
	}
	if err != nil {
		return SendResult{}, a.storageError("read the run", err)
	}
	if req.RequestID != "" && slices.Contains(run.ResumeRequestIDs, req.RequestID) {
		return SendResult{RunID: run.ID, Duplicate: true, Status: run.Status}, nil
	}
	from := resumableStatuses
	if req.Recovery {
		if !run.Status.Active() {
			return SendResult{RunID: run.ID, Duplicate: true, Status: run.Status}, nil // recovered meanwhile
		}
		from = chat.ActiveRunStatuses()
	} else if err := a.checkResumable(run); err != nil {
		return SendResult{}, err
	}

	user, own, err := a.userMessageOf(run)
	if err != nil {
		return SendResult{}, err
	}
	checkpoint, err := a.seam(own)
	if err != nil {
		return SendResult{}, a.storageError("store the interrupted reply", err)
	}

	now := a.now()
	info := run
	if req.Recovery && run.Status == chat.RunRunning && run.CancelReason != chat.CancelShutdown {
		// Its process died while it streamed (a clean shutdown suspends it instead).
		info.Recoveries++
		if info.Recoveries > a.cfg.MaxRecoveries {
			return a.giveUp(info, from)
		}
	}
	info.Status = chat.RunRunning
	for _, m := range checkpoint {
		if m.Tool != nil && m.Tool.Status == chat.ToolAwaitingApproval {
			// It still waits for a person: it waits on, from this process.
			info.Status = chat.RunAwaitingApproval
		}
	}
	info.Error, info.EndedAt, info.CancelReason, info.PendingApproval = nil, nil, "", nil
	info.LastActivityAt = now
	if req.RequestID != "" {
		info.ResumeRequestIDs = append(slices.Clip(info.ResumeRequestIDs), req.RequestID)
	}
	move := a.journal.moveRun
	if req.RequestID != "" {
		// A person's resume: the session is active again, and counts against its
		// owner's limit (a recovery continues a run that counted already).
		move = func(r chat.Run, from ...chat.RunStatus) error { return a.journal.continueRun(r, a.runLimit(), from...) }
	}
	if err := move(info, from...); err != nil {
		if errors.Is(err, store.ErrRunLimit) {
			return SendResult{}, a.runLimitError()
		}
		if errors.Is(err, store.ErrStale) {
			return SendResult{}, errorf(CodeConflict, "run %s was changed meanwhile; reconnect to see it", run.ID)
		}
		if errors.Is(err, store.ErrNotFound) {
			return SendResult{}, a.gone("store the run", err) // it was just read: deleted since
		}
		return SendResult{}, a.storageError("store the run", err)
	}
	a.journal.reload() // the seam may have removed a row: read the next position again
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}

	state := newRunState(info)
	// A regeneration that has written nothing yet answers beside the older answers.
	state.forks = info.RetryOf != nil && len(checkpoint) == 0
	for i := range checkpoint {
		m := checkpoint[i]
		if m.Tool == nil {
			continue
		}
		state.calls[m.Tool.CallID] = true
		if m.Status == chat.MessageStreaming {
			// Running or waiting for a decision: the agent ends it, or waits for it. The
			// output a dead process logged (the seam put it in Output, as clients are
			// shown it) stays in the log, and what a re-run streams is logged after it.
			logged := 0
			if m.Tool.Output != nil {
				logged = len(*m.Tool.Output)
			}
			state.tools[m.Tool.CallID] = &liveMessage{msg: m, log: a.journal.streamFrom(m.ID, logged)}
		}
		if m.Tool.Status == chat.ToolAwaitingApproval {
			// A decision can come before the agent asks for it (AwaitDecision).
			state.approvals[m.Tool.CallID] = make(chan Decision, 1)
		}
	}
	state.info.PendingApproval = pendingOf(state)
	a.logger().Info().Str("run_id", run.ID.String()).Bool("recovery", req.Recovery).Int("recoveries", info.Recoveries).Int("checkpoint", len(checkpoint)).Msg("continuing a run from its checkpoint")
	a.run = state
	a.countActive(state)
	a.publish(a.runEvent(state, Event{Type: EventRunStatus, Run: runView(state)}))
	a.startRunAgent(state, user, checkpoint)
	return SendResult{RunID: run.ID, Status: chat.RunRunning}, nil
}

// takeUpSuspended continues, once per actor, the session's latest run when it is
// unfinished and no actor drives it: one a person's decision waits on, suspended when
// its actor was evicted (or by a shutdown whose start-up recovery has not reached it),
// so a hello shows its pending approval and a decision continues it. Not counted as a
// recovery when it was suspended cleanly.
func (a *Actor) takeUpSuspended() error {
	if a.checkedSuspended || a.run != nil || !a.cfg.SuspendOnStop {
		return nil
	}
	r, err := a.journal.runLatest()
	if errors.Is(err, store.ErrNotFound) {
		a.checkedSuspended = true
		return nil
	}
	if err != nil {
		return err
	}
	if !r.Status.Active() {
		a.checkedSuspended = true
		return nil
	}
	if _, err := a.continueRun(ContinueRequest{RunID: r.ID, Recovery: true}); err != nil {
		return err // tried again by the next command
	}
	a.checkedSuspended = true
	return nil
}

// takeUpLoaded is takeUpSuspended for commands that do not otherwise read the session.
func (a *Actor) takeUpLoaded() error {
	if a.checkedSuspended || a.run != nil || !a.cfg.SuspendOnStop {
		return nil
	}
	if err := a.load(); err != nil {
		return a.loadError(err)
	}
	if a.session == nil {
		return nil
	}
	if err := a.takeUpSuspended(); err != nil {
		return a.storageError("continue the session's run", err)
	}
	return nil
}

// checkResumable refuses a resume of a run that is not the session's latest ended,
// undismissed, interrupted, failed or cancelled run.
func (a *Actor) checkResumable(run chat.Run) error {
	latest, err := a.journal.runLatest()
	if err != nil {
		return a.storageError("read the session's runs", err)
	}
	switch {
	case latest.ID != run.ID:
		return errorf(CodeConflict, "run %s is not the session's latest run", run.ID)
	case !withResumable(run).Resumable:
		return errorf(CodeConflict, "run %s is %s and cannot be resumed", run.ID, resumableWhy(run))
	}
	return nil
}

// checkRetryable is checkResumable; with regenerate, any run of the session that has
// ended may be answered again.
func (a *Actor) checkRetryable(run chat.Run, regenerate bool) error {
	if !regenerate {
		return a.checkResumable(run)
	}
	if run.Status.Active() {
		return errorf(CodeRunActive, "run %s is still active in this session", run.ID)
	}
	return nil
}

func resumableWhy(r chat.Run) string {
	if r.DismissedAt != nil {
		return "dismissed"
	}
	return string(r.Status)
}

// userMessageOf returns the user message run answers (its own first message, or, for a
// retry, that of the run it retries) and the run's messages after it. A retry has no
// user message of its own: one it starts with steered it (it came before the retry wrote
// anything), and is part of its answer.
func (a *Actor) userMessageOf(run chat.Run) (chat.Message, []chat.Message, error) {
	msgs, err := a.journal.messagesByRun(run.ID)
	if err != nil {
		return chat.Message{}, nil, a.storageError("read the run", err)
	}
	if run.RetryOf == nil && len(msgs) > 0 && msgs[0].Role == chat.RoleUser {
		return msgs[0], msgs[1:], nil
	}
	for r, hops := run, 0; r.RetryOf != nil && hops < 100; hops++ {
		if r, err = a.journal.runGet(*r.RetryOf); err != nil {
			return chat.Message{}, nil, a.storageError("read the run", err)
		}
		first, err := a.journal.messagesByRun(r.ID)
		if err != nil {
			return chat.Message{}, nil, a.storageError("read the run", err)
		}
		if r.RetryOf == nil && len(first) > 0 && first[0].Role == chat.RoleUser {
			return first[0], msgs, nil
		}
	}
	return chat.Message{}, nil, errorf(CodeInternal, "run %s has no user message", run.ID)
}

// seam makes a run's stored messages (after its user message) a checkpoint: an
// assistant segment still streaming was open when its process died, so it ends
// interrupted with the text its stream log kept (up to one interval before the crash),
// or goes when nothing was kept (unless a subscriber was shown it: then it ends
// interrupted, empty). Tool calls still streaming stay for the agent, with the output
// the log kept.
func (a *Actor) seam(msgs []chat.Message) ([]chat.Message, error) {
	var open []uuid.UUID
	for _, m := range msgs {
		if m.Status == chat.MessageStreaming {
			open = append(open, m.ID)
		}
	}
	logged, err := a.journal.streamed(open)
	if err != nil {
		return nil, err
	}
	checkpoint := make([]chat.Message, 0, len(msgs))
	for _, m := range msgs {
		if m.Status != chat.MessageStreaming {
			checkpoint = append(checkpoint, m)
			continue
		}
		text, ok := logged[m.ID]
		if m.Tool != nil {
			if ok {
				t := *m.Tool
				t.Output = &text
				m.Tool = &t
			}
			checkpoint = append(checkpoint, m)
			continue
		}
		if ok {
			m.Content = text
		}
		if m.Content == "" && len(a.subs) == 0 {
			// Nobody was told of it in this process (start-up recovers before serving):
			// a segment that stored nothing is not part of the transcript.
			if _, err := a.journal.deleteEmpty(m); err != nil {
				return nil, err
			}
			continue
		}
		m.Status = chat.MessageInterrupted
		m.Error = &chat.ErrorInfo{Code: CodeInterrupted, Message: "the server stopped while this was being written"}
		m.UpdatedAt = a.now()
		if err := a.journal.update(m, a.journal.w.Logged(m.ID)); err != nil {
			return nil, err
		}
		// Subscribers hold it as streaming: they see it end, like any segment.
		a.publish(Event{Type: EventSegmentEnded, RunID: *m.RunID, RequestID: m.RequestID, MessageID: m.ID, Status: m.Status, Error: m.Error})
		checkpoint = append(checkpoint, m)
	}
	return checkpoint, nil
}

// retryRun answers the user message of run req.RunID again as a new run whose requestId
// is req.RequestID: its answer is a new branch under that message, beside the old
// answer, and the active path; the old run is no longer resumable. Every tab gets
// branch.selected (the path up to the user message), then chat.started.
func (a *Actor) retryRun(req ContinueRequest) (SendResult, error) {
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}
	if err := a.live(); err != nil {
		return SendResult{}, err
	}
	if prev, err := a.journal.runByRequest(req.RequestID); err == nil {
		return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
	}
	if a.run != nil {
		return SendResult{}, errorf(CodeRunActive, "run %s is still active in this session", a.run.info.ID)
	}
	old, err := a.journal.runGet(req.RunID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && old.SessionID != a.id) {
		return SendResult{}, errorf(CodeNotFound, "run %s does not exist in this session", req.RunID)
	}
	if err != nil {
		return SendResult{}, a.storageError("read the run", err)
	}
	if err := a.checkRetryable(old, req.Regenerate); err != nil {
		return SendResult{}, err
	}
	user, _, err := a.userMessageOf(old)
	if err != nil {
		return SendResult{}, err
	}
	kids, err := a.journal.children(&user.ID)
	if err != nil {
		return SendResult{}, a.storageError("read the answers", err)
	}
	// chat.started carries the user message as the tabs hold it: with its branch (it
	// may be an edited question), which the run's rows do not say.
	siblings, err := a.journal.children(user.ParentID)
	if err != nil {
		return SendResult{}, a.storageError("read the question's branch", err)
	}
	user.Branch = chat.BranchOf(user.ID, siblings)
	now := a.now()
	info := chat.Run{
		ID:             newID(),
		SessionID:      a.id,
		RequestID:      req.RequestID,
		Status:         chat.RunRunning,
		StartedAt:      now,
		LastActivityAt: now,
		Model:          a.cfg.ModelName,
		RetryOf:        &old.ID,
	}
	err = a.journal.startRetry(info, user.ID, a.runLimit())
	if errors.Is(err, store.ErrRunLimit) {
		return SendResult{}, a.runLimitError()
	}
	if errors.Is(err, store.ErrConflict) {
		if prev, e := a.journal.runByRequest(req.RequestID); e == nil {
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return SendResult{}, a.gone("store the run", err)
	}
	if err != nil {
		return SendResult{}, a.storageError("store the run", err)
	}
	a.journal.setLeaf(&user.ID, kids, true)
	if old.DismissedAt == nil && !old.Status.Active() && old.Status != chat.RunDone {
		old.DismissedAt = &now // answered again: no longer offered to continue
		if err := a.journal.moveRun(old, old.Status); err != nil {
			a.logger().Error().Err(err).Str("run_id", old.ID.String()).Msg("store that a run was answered again")
		}
	}
	a.logger().Info().Str("run_id", info.ID.String()).Str("retry_of", old.ID.String()).Msg("answering a run's message again")
	a.publishBranch(&user.ID)
	state := newRunState(info)
	state.forks = len(kids) > 0
	a.begin(state, user)
	return SendResult{RunID: info.ID, Status: chat.RunRunning}, nil
}

// historyReader returns the read of what a run's agent is told of the conversation
// before its user message: the newest messages of the branch that ends at parent (the
// user message's parent; nil: none). Any goroutine may make it.
func (a *Actor) historyReader(parent *uuid.UUID) func() ([]chat.Message, error) {
	if parent == nil {
		return func() ([]chat.Message, error) { return nil, nil }
	}
	if msgs, ok := a.journal.recent.upTo(*parent, a.cfg.HistoryMessages); ok {
		return func() ([]chat.Message, error) { return msgs, nil } // from memory
	}
	read := a.journal.pathReader(parent, 0, a.cfg.HistoryMessages)
	return func() ([]chat.Message, error) {
		msgs, _, err := read()
		return msgs, err
	}
}

// suspend leaves run unfinished for the next process, at a clean shutdown: the text of
// its open segment is stored (interrupted, like any segment a run leaves open), the run
// keeps its status and is marked suspended by a shutdown, and the agent is stopped.
// Tool calls still running stay so: their outcome is unknown, and the continuation
// decides. Subscribers see the segment end; the run stays active for them.
func (a *Actor) suspend(run *runState) {
	run.suspend()
	clear(run.approvals)
	if err := a.closeSegment(run, chat.MessageInterrupted, nil); err != nil {
		a.logger().Error().Err(err).Msg("store the open segment at shutdown")
	}
	a.run = nil
	run.info.CancelReason = chat.CancelShutdown
	run.info.LastActivityAt = a.now()
	a.countAs(run, "") // no longer active in this process
	if err := a.journal.updateRun(run.info); err != nil {
		a.logger().Error().Err(err).Str("run_id", run.info.ID.String()).Msg("store a suspended run")
	}
	a.logger().Info().Str("run_id", run.info.ID.String()).Str("status", string(run.info.Status)).Msg("suspended a run for the next process to continue")
}

// giveUp ends a run that crashed its process too often as interrupted, with what its
// streaming rows hold.
func (a *Actor) giveUp(info chat.Run, from []chat.RunStatus) (SendResult, error) {
	a.logger().Error().Str("run_id", info.ID.String()).Int("recoveries", info.Recoveries).Msg("a run's process died too often; ending it interrupted")
	return a.interrupt(info, fmt.Sprintf("the server stopped during this run %d times; it was not continued again", info.Recoveries), from...)
}

// interrupt ends a run no agent drives as interrupted with message, with what its
// streaming rows hold, from its stored status (or from).
func (a *Actor) interrupt(info chat.Run, message string, from ...chat.RunStatus) (SendResult, error) {
	if len(from) == 0 {
		from = []chat.RunStatus{info.Status}
	}
	now := a.now()
	info.Status = chat.RunInterrupted
	info.Error = &chat.ErrorInfo{Code: CodeInterrupted, Message: message}
	info.EndedAt, info.LastActivityAt = &now, now
	info.PendingApproval = nil
	if err := a.journal.moveRun(info, from...); err != nil {
		return SendResult{}, a.storageError("store the run", err)
	}
	if a.journal.lost == nil {
		a.journal.lost = make(map[uuid.UUID]bool)
	}
	a.journal.lost[info.ID] = true // settle its streaming rows
	if err := a.journal.settle(info.ID, chat.MessageInterrupted, now); err != nil {
		a.logger().Error().Err(err).Msg("settle the rows of an interrupted run")
	}
	a.journal.q.Await() // answered before its terminal event, as every run's end
	r := withResumable(info)
	a.publish(Event{Type: EventChatError, RunID: info.ID, RequestID: info.RequestID, Run: &r})
	return SendResult{RunID: info.ID, Status: chat.RunInterrupted}, nil
}

func (a *Actor) dismiss(runID uuid.UUID) (SendResult, error) {
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}
	if err := a.live(); err != nil {
		return SendResult{}, err
	}
	if a.run != nil && a.run.info.ID == runID {
		return SendResult{}, errorf(CodeConflict, "run %s is active: cancel it first", runID)
	}
	run, err := a.journal.runGet(runID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.SessionID != a.id) {
		return SendResult{}, errorf(CodeNotFound, "run %s does not exist in this session", runID)
	}
	if err != nil {
		return SendResult{}, a.storageError("read the run", err)
	}
	if run.DismissedAt != nil {
		return SendResult{RunID: run.ID, Duplicate: true, Status: run.Status}, nil
	}
	if err := a.checkResumable(run); err != nil {
		return SendResult{}, err
	}
	now := a.now()
	run.DismissedAt = &now
	if err := a.journal.moveRun(run, run.Status); err != nil {
		if errors.Is(err, store.ErrStale) {
			return SendResult{}, errorf(CodeConflict, "run %s was changed meanwhile; reconnect to see it", run.ID)
		}
		return SendResult{}, a.storageError("store the run", err)
	}
	r := withResumable(run)
	a.publish(Event{Type: EventRunStatus, RunID: run.ID, RequestID: run.RequestID, Run: &r})
	return SendResult{RunID: run.ID, Status: run.Status}, nil
}
