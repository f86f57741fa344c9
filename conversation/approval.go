package conversation

import (
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
)

// Decision is a person's answer to an approval request.
type Decision struct {
	Approved bool
}

// DecideResult says what a decision did to the run.
type DecideResult struct {
	RunID  uuid.UUID
	Status chat.RunStatus // the run's status after the decision
}

// DeclinedOutput is the result a denied tool call gets, and what the model is told.
const DeclinedOutput = "The user declined to run this tool."

// Decide answers the pending approval of tool call callID, of run runID when that is not
// uuid.Nil (a client that names the run cannot approve a call of a later run that reused
// the call's id). The first decision wins: a call that was already decided or ended (also
// in the run that just ended), or one of another run, returns *Error with CodeConflict;
// an unknown call CodeNotFound. An approved call is running when Decide returns; a denied
// one has ended with tool status denied.
func (a *Actor) Decide(ctx context.Context, runID uuid.UUID, callID string, approved bool) (DecideResult, error) {
	return call(ctx, a, func(r chan result[DecideResult]) intent { return &decideIntent{runID, callID, approved, r} })
}

type (
	decideIntent struct {
		runID    uuid.UUID
		callID   string
		approved bool
		reply    chan result[DecideResult]
	}
	approvalIntent struct {
		run   *runState
		call  ToolCall
		reply chan result[<-chan Decision]
	}
	awaitDecisionIntent struct {
		run    *runState
		callID string
		reply  chan result[<-chan Decision]
	}
	pausedIntent struct {
		run     *runState
		resumed bool
		reply   chan error
	}
	usageIntent struct {
		run   *runState
		usage chat.Usage
	}
)

// onAwaitApproval stores and publishes a tool call that waits for a person, and moves the
// run to awaiting_approval (a paused run stays paused).
func (a *Actor) onAwaitApproval(run *runState, call ToolCall) (<-chan Decision, error) {
	if _, err := a.startTool(run, call, chat.ToolAwaitingApproval); err != nil {
		return nil, err
	}
	ch := make(chan Decision, 1)
	run.approvals[call.ID] = ch
	status := run.info.Status
	if status == chat.RunRunning {
		status = chat.RunAwaitingApproval
	}
	a.setStatus(run, status)
	return ch, nil
}

// onAwaitDecision waits for the decision on a call of the run's checkpoint that is
// stored as awaiting_approval, and moves the run to awaiting_approval (a paused run stays
// paused).
func (a *Actor) onAwaitDecision(run *runState, callID string) (<-chan Decision, error) {
	if !a.isCurrent(run) {
		return nil, ErrRunEnded
	}
	if ch, ok := run.decided[callID]; ok {
		return ch, nil // decided before the agent asked
	}
	tool := run.tools[callID]
	if tool == nil || tool.msg.Tool.Status != chat.ToolAwaitingApproval {
		return nil, errorf(CodeNotFound, "tool call %q is not waiting for a decision", callID)
	}
	if ch, ok := run.approvals[callID]; ok {
		return ch, nil
	}
	ch := make(chan Decision, 1)
	run.approvals[callID] = ch
	status := run.info.Status
	if status == chat.RunRunning {
		status = chat.RunAwaitingApproval
	}
	a.setStatus(run, status)
	return ch, nil
}

// onPaused records that the agent paused (or resumed) the session's sandbox while the
// run waits.
func (a *Actor) onPaused(run *runState, resumed bool) error {
	if !a.isCurrent(run) {
		return ErrRunEnded
	}
	switch {
	case !resumed && run.info.Status == chat.RunAwaitingApproval:
		a.setStatus(run, chat.RunPaused)
	case resumed && run.info.Status == chat.RunPaused:
		// A decision that raced the pause left the run paused; it is not any more.
		status := chat.RunRunning
		if len(run.approvals) > 0 {
			status = chat.RunAwaitingApproval
		}
		a.setStatus(run, status)
	}
	return nil
}

func (a *Actor) onUsage(run *runState, u chat.Usage) {
	if !a.isCurrent(run) {
		return
	}
	run.info.Usage.InputTokens += u.InputTokens
	run.info.Usage.OutputTokens += u.OutputTokens
	if u.ContextTokens > 0 {
		run.info.Usage.ContextTokens = u.ContextTokens
	}
	if u.ContextWindow > 0 {
		run.info.Usage.ContextWindow = u.ContextWindow
	}
	// Clients see the usage, and how full the context is, as it changes; it is stored
	// with the run's next status change or its end.
	a.publish(a.runEvent(run, Event{Type: EventRunStatus, Run: runView(run)}))
}

func (a *Actor) decide(runID uuid.UUID, callID string, approved bool) (DecideResult, error) {
	if err := a.takeUpLoaded(); err != nil {
		return DecideResult{}, err
	}
	run := a.run
	if runID != uuid.Nil && (run == nil || run.info.ID != runID) {
		return DecideResult{}, errorf(CodeConflict, "run %s is not waiting for a decision", runID)
	}
	if run == nil {
		if a.lastCalls[callID] {
			return DecideResult{}, errorf(CodeConflict, "tool call %q belongs to a run that has ended", callID)
		}
		return DecideResult{}, errorf(CodeNotFound, "no approval is pending for tool call %q: no run is active", callID)
	}
	ch, waiting := run.approvals[callID]
	if !waiting {
		if run.calls[callID] {
			return DecideResult{}, errorf(CodeConflict, "tool call %q was already decided", callID)
		}
		return DecideResult{}, errorf(CodeNotFound, "no approval is pending for tool call %q", callID)
	}
	delete(run.approvals, callID)
	tool := run.tools[callID]
	if approved {
		m := tool.msg
		t := *m.Tool
		t.Status = chat.ToolRunning
		m.Tool = &t
		m.UpdatedAt = a.now()
		tool.msg = m
		if err := a.journal.update(m, nil); err != nil {
			a.logger().Error().Err(err).Msg("store an approval")
		}
		v := tool.view()
		a.publish(a.runEvent(run, Event{Type: EventToolUpdate, Message: &v}))
	} else if err := a.endTool(run, tool, chat.MessageComplete, chat.ToolDenied, DeclinedOutput, nil); err != nil {
		a.logger().Error().Err(err).Msg("store a denial")
	}
	// The decision is stored before the agent hears of it: an approved call must not run
	// while the database still says it waits (a crash would ask, and run it, again). A
	// decision the database did not take (it failed, or refused it: the lease's fence)
	// is not heard: the run ends, as on any write of it that cannot be stored.
	switch a.awaitStored(run, "store a decision") {
	case errWriteRefused:
		return DecideResult{}, errorf(CodeStorage, "could not store the decision: the run ended")
	case errWriteWaits:
		return DecideResult{}, errorf(CodeStorage, "could not store the decision: the database is unavailable")
	}
	ch <- Decision{Approved: approved}
	run.decided[callID] = ch

	status := chat.RunRunning
	if len(run.approvals) > 0 {
		status = chat.RunAwaitingApproval
	}
	a.setStatus(run, status)
	return DecideResult{RunID: run.info.ID, Status: status}, nil
}

// setStatus stores and publishes a non-terminal status change of the active run, with its
// pending approval: the oldest call still waiting for a decision.
func (a *Actor) setStatus(run *runState, status chat.RunStatus) {
	pending := pendingOf(run)
	if status == run.info.Status && samePending(pending, run.info.PendingApproval) {
		return
	}
	run.info.Status = status
	a.countActive(run)
	run.info.PendingApproval = pending
	run.info.LastActivityAt = a.now()
	if err := a.journal.updateRun(run.info); err != nil {
		a.logger().Error().Err(err).Str("run_id", run.info.ID.String()).Msg("store a run status")
	}
	// Stored before it is told (journal.BeforeAnnounce): a run shown waiting for a
	// person must wait in the database too, or a crash would lose the approval every tab
	// shows. (A status change is no token: nothing streams while the run waits.) One the
	// database cannot take ends the run instead.
	if a.awaitStored(run, "store the run's status") != nil {
		return
	}
	a.publish(a.runEvent(run, Event{Type: EventRunStatus, Run: runView(run)}))
}

// pendingOf returns the run's pending approval: the oldest call still waiting for a
// decision, nil for none.
func pendingOf(run *runState) *chat.PendingApproval {
	waiting := make([]*liveMessage, 0, len(run.approvals))
	for id := range run.approvals {
		waiting = append(waiting, run.tools[id])
	}
	if len(waiting) == 0 {
		return nil
	}
	oldest := slices.MinFunc(waiting, func(x, y *liveMessage) int { return int(x.msg.Position - y.msg.Position) })
	t := oldest.msg.Tool
	return &chat.PendingApproval{ToolCallID: t.CallID, Name: t.Name, Input: t.Input}
}

func samePending(x, y *chat.PendingApproval) bool {
	if x == nil || y == nil {
		return x == y
	}
	return x.ToolCallID == y.ToolCallID
}
