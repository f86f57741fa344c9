package conversation

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/chat"
)

// Decision is a person's answer to an approval request (or its expiry's).
type Decision struct {
	Approved bool
	// Output is what the model is told of a denied call: DeclinedOutput, or ExpiredOutput.
	Output string
}

// ExpiredOutput is the result a call gets that nobody decided before its approval expired
// (the agent's ApprovalExpire), and what the model is told.
const ExpiredOutput = "Nobody approved this tool call in time: the approval request expired and the tool was not run."

// ScopeSession is the scope of an approval that also approves, for the rest of the
// session, later calls that match the rule the server derives from the call (RuleFor).
const ScopeSession = "session"

// DecideRequest is a decision on a pending tool approval, with who made it.
type DecideRequest struct {
	// RunID, when not uuid.Nil, names the run that asked.
	RunID    uuid.UUID
	CallID   string
	Approved bool
	// InputHash, when set, must be chat.InputHash of the call's input: the input the
	// person was shown. Another hash is refused with CodeConflict, and the call waits on.
	InputHash string
	// By is the deciding user's id, Via the transport it came through (chat.DecidedVia*).
	By  string
	Via string
	// Scope ScopeSession (approvals only) also stores a rule that approves later calls
	// the call matches (RuleFor); "" decides this call only.
	Scope string
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
	return a.DecideAs(ctx, DecideRequest{RunID: runID, CallID: callID, Approved: approved})
}

// DecideAs is Decide with the decision's input hash, author, transport and scope, which
// are stored with the call (chat.ToolDecision). A hash that is not the call's input's
// returns CodeConflict and changes nothing; a scope other than "" or ScopeSession, or
// ScopeSession on a denial, CodeBadRequest.
func (a *Actor) DecideAs(ctx context.Context, req DecideRequest) (DecideResult, error) {
	switch {
	case req.Scope != "" && req.Scope != ScopeSession:
		return DecideResult{}, errorf(CodeBadRequest, `scope must be "session" or absent`)
	case req.Scope != "" && !req.Approved:
		return DecideResult{}, errorf(CodeBadRequest, `scope "session" goes with an approval only`)
	}
	return call(ctx, a, func(r chan result[DecideResult]) intent { return &decideIntent{req, r} })
}

type (
	decideIntent struct {
		req   DecideRequest
		reply chan result[DecideResult]
	}
	expireIntent struct {
		run    *runState
		callID string
		reply  chan error
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
	if rule := a.matchingRule(call); rule != nil {
		// Allowed for this conversation: the call runs without asking, recorded as
		// approved by the rule (and by whoever made it).
		d := &chat.ToolDecision{Approved: true, By: rule.CreatedBy, At: a.now(), Via: chat.DecidedViaRule, RuleID: &rule.ID}
		if _, err := a.startToolDecided(run, call, chat.ToolRunning, d); err != nil {
			return nil, err
		}
		ch := make(chan Decision, 1)
		ch <- Decision{Approved: true}
		run.decided[call.ID] = ch
		return ch, nil
	}
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

func (a *Actor) decide(req DecideRequest) (DecideResult, error) {
	if err := a.takeUpLoaded(); err != nil {
		return DecideResult{}, err
	}
	runID, callID := req.RunID, req.CallID
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
	tool := run.tools[callID]
	if req.InputHash != "" && req.InputHash != chat.InputHash(tool.msg.Tool.Input) {
		return DecideResult{}, errorf(CodeConflict, "tool call %q: inputHash is not the hash of the call's input; the call still waits", callID)
	}
	var rule *chat.ApprovalRule
	if req.Scope == ScopeSession {
		r, err := a.ruleFor(tool.msg.Tool, req)
		if err != nil {
			return DecideResult{}, err
		}
		rule = &r
	}
	delete(run.approvals, callID)
	d := &chat.ToolDecision{Approved: req.Approved, By: req.By, At: a.now(), Via: req.Via}
	output := DeclinedOutput
	if req.Via == chat.DecidedViaExpiry {
		output = ExpiredOutput
	}
	if req.Approved {
		m := tool.msg
		t := *m.Tool
		t.Status = chat.ToolRunning
		t.Decision = d
		m.Tool = &t
		m.UpdatedAt = a.now()
		tool.msg = m
		if err := a.journal.update(m, nil); err != nil {
			a.logger().Error().Err(err).Msg("store an approval")
		}
	} else {
		t := *tool.msg.Tool
		t.Decision = d
		tool.msg.Tool = &t
		if err := a.endTool(run, tool, chat.MessageComplete, chat.ToolDenied, output, nil); err != nil {
			a.logger().Error().Err(err).Msg("store a denial")
		}
	}
	// The decision is stored before the agent hears of it: an approved call must not run
	// while the database still says it waits (a crash would ask, and run it, again). A
	// decision the database did not take (it failed, or refused it: the lease's fence)
	// is not heard: the run ends, as on any write of it that cannot be stored.
	// An approval is announced (tool.update) only once stored too.
	switch a.awaitStored(run, "store a decision") {
	case errWriteRefused:
		return DecideResult{}, errorf(CodeStorage, "could not store the decision: the run ended")
	case errWriteWaits:
		return DecideResult{}, errorf(CodeStorage, "could not store the decision: the database is unavailable, and the run ended with error storage (resume it once the database answers)")
	}
	if req.Approved {
		v := tool.view()
		a.publish(a.runEvent(run, Event{Type: EventToolUpdate, Message: &v}))
	}
	if rule != nil {
		// The call is approved either way; a rule that could not be stored is not made.
		if err := a.addRule(run, *rule); err != nil {
			a.logger().Error().Err(err).Msg("store an approval rule")
		}
	}
	if req.Approved {
		ch <- Decision{Approved: true}
	} else {
		ch <- Decision{Output: output}
	}
	run.decided[callID] = ch

	status := chat.RunRunning
	if len(run.approvals) > 0 {
		status = chat.RunAwaitingApproval
	}
	a.setStatus(run, status)
	return DecideResult{RunID: run.info.ID, Status: status}, nil
}

// onExpire denies a call of the run still waiting for its decision when its approval
// expires; a call decided meanwhile is left as it was.
func (a *Actor) onExpire(run *runState, callID string) error {
	if !a.isCurrent(run) {
		return ErrRunEnded
	}
	if _, waiting := run.approvals[callID]; !waiting {
		return nil
	}
	_, err := a.decide(DecideRequest{RunID: run.info.ID, CallID: callID, Via: chat.DecidedViaExpiry})
	return err
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

// WaitDecision waits for the decision an AwaitApproval or AwaitDecision channel brings,
// for an agent that expires approvals itself (its agent loop does the same with
// Config's ApprovalExpire): with a non-zero deadline, when it passes first the call is
// expired (out.Expire) and the expiry's denial is the decision. ErrRunEnded when the
// channel closes, ctx's error when ctx ends.
func WaitDecision(ctx context.Context, out Emitter, clock clockwork.Clock, callID string, ch <-chan Decision, deadline time.Time) (Decision, error) {
	var expire <-chan time.Time
	if !deadline.IsZero() {
		t := clock.NewTimer(max(deadline.Sub(clock.Now()), 0))
		defer t.Stop()
		expire = t.Chan()
	}
	for {
		select {
		case d, ok := <-ch:
			if !ok {
				return d, ErrRunEnded
			}
			return d, nil
		case <-expire:
			expire = nil
			if err := out.Expire(callID); err != nil {
				return Decision{}, err
			}
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
	}
}
