package conversation

import (
	"context"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// runState is the live part of the active run. The actor owns it; the run goroutine only
// holds the pointer to name its run in intents.
type runState struct {
	info chat.Run
	// token is the sender's bearer token (SendRequest.Token), in memory only.
	token  string
	ctx    context.Context
	cancel context.CancelFunc
	// suspend cancels ctx with ErrSuspended as its cause (suspend).
	suspend func()
	// stored, when not nil, is closed once the run's start is stored: its agent waits
	// for it before it calls the model (a start the database may refuse must not reach
	// the model; see runcount.go). When the start is refused, ctx ends instead.
	stored chan struct{}

	seg       *liveMessage             // the open assistant segment (text or reasoning)
	tools     map[string]*liveMessage  // running tool calls by call id
	calls     map[string]bool          // every call id the run has used
	approvals map[string]chan Decision // calls waiting for a decision, by call id
	// decided holds the channels of decisions made, so a continued run's agent that asks
	// for one (AwaitDecision) after it was made still gets it.
	decided map[string]chan Decision

	// counted is the status the run is counted under in chatd_runs_active, "" for none.
	counted chat.RunStatus
	// progressDirty: the run's progress or agent state changed since it was last queued for the
	// database (see progress.go).
	progressDirty bool
	// tail is the run's last message (its user message before it wrote any): the
	// parent of its next one. A run is always on one branch.
	tail *uuid.UUID
	// forks: the run's first message will be an alternative to older ones (a
	// regeneration of a question that has answers).
	forks bool
}

func newRunState(info chat.Run) *runState {
	ctx, cancelCause := context.WithCancelCause(context.Background())
	cancel := func() { cancelCause(nil) }
	return &runState{
		info:      info,
		ctx:       ctx,
		cancel:    cancel,
		suspend:   func() { cancelCause(ErrSuspended) },
		tools:     make(map[string]*liveMessage),
		calls:     make(map[string]bool),
		approvals: make(map[string]chan Decision),
		decided:   make(map[string]chan Decision),
	}
}

func (a *Actor) isCurrent(run *runState) bool { return run != nil && a.run == run }

func (a *Actor) send(req SendRequest) (SendResult, error) {
	if err := ValidateSend(req, a.cfg.MaxContentBytes); err != nil {
		return SendResult{}, err
	}
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}
	if err := a.live(); err != nil {
		return SendResult{}, err
	}
	if err := a.takeUpSuspended(); err != nil {
		return SendResult{}, a.storageError("continue the session's run", err)
	}
	if !req.fromQueue {
		if err := a.loadQueued(); err != nil {
			return SendResult{}, a.storageError("read the queued messages", err)
		}
		if i := a.queuedAt(req.RequestID); i >= 0 {
			// A repeat of a message still queued.
			st := StatusQueued
			if a.queued[i].Steering {
				st = StatusSteering
			}
			return SendResult{Duplicate: true, Status: st}, nil
		}
		if runID, ok := a.steered[req.RequestID]; ok {
			// A repeat of a steering message the run has taken.
			return SendResult{RunID: runID, Duplicate: true, Status: StatusSteered}, nil
		}
	}
	if a.run != nil {
		if a.run.info.RequestID == req.RequestID {
			return SendResult{RunID: a.run.info.ID, Duplicate: true, Status: a.run.info.Status}, nil
		}
		// A retry of an older request is still a duplicate, not a second run.
		prev, err := a.journal.runByRequest(req.RequestID)
		if err == nil {
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
		if !errors.Is(err, store.ErrNotFound) && a.doubleText(req) == chat.DoubleTextInterrupt {
			// The database did not answer: the message could not be stored now, and the
			// run it would interrupt is left alone rather than cancelled for nothing.
			return SendResult{}, a.storageError("read the session's runs", err)
		}
		if req.EditOf != nil && a.doubleText(req) != chat.DoubleTextInterrupt {
			// An edit starts another branch: it neither waits nor steers.
			return SendResult{}, errorf(CodeRunActive, "run %s is still active in this session: cancel it, or send the edit with whileRunning interrupt", a.run.info.ID)
		}
		switch a.doubleText(req) {
		case chat.DoubleTextQueue, chat.DoubleTextSteer:
			return a.enqueue(req, a.doubleText(req) == chat.DoubleTextSteer)
		case chat.DoubleTextInterrupt:
		default:
			return SendResult{}, errorf(CodeRunActive, "run %s is still active in this session", a.run.info.ID)
		}
		// interrupt: the active run ends cancelled with what it wrote so far, then the
		// message starts a run of its own.
		a.finish(a.run, chat.RunCancelled, nil, chat.CancelNewMessage)
	}
	// A repeated request is answered from what is stored, without a statement that
	// could start anything.
	if a.journal.knowsRequest(req.RequestID) {
		prev, err := a.journal.runByRequest(req.RequestID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			// A new id whose hash is another's: it starts a run below.
		case err != nil:
			// Not a new run either: the client sends it again.
			return SendResult{}, a.storageError("read the run", err)
		case prev.Status.Active():
			// Stored as running, yet no agent drives it (none is active here): a start
			// whose answer was lost. Start it now.
			return a.adopt(prev)
		default:
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
	}

	if req.WhileRunning == chat.DoubleTextSteer && !req.fromQueue && req.EditOf == nil {
		// Asked for by name, steering needs a run to steer.
		return SendResult{}, errorf(CodeNoRun, "no run is active in this session to steer: send the message without whileRunning steer")
	}
	// The message answers the active path, or, for an edit, what the edited one did.
	parent, siblings := a.journal.leaf, []uuid.UUID(nil)
	if req.EditOf != nil {
		edited, kids, err := a.editedMessage(*req.EditOf)
		if err != nil {
			return SendResult{}, err
		}
		parent, siblings = edited.ParentID, kids
	} else if kids, err := a.journal.leafChildren(); err != nil {
		return SendResult{}, a.storageError("read the conversation", err)
	} else {
		siblings = kids
	}
	now := a.now()
	runID := newID()
	info := chat.Run{
		ID:             runID,
		SessionID:      a.id,
		RequestID:      req.RequestID,
		Status:         chat.RunRunning,
		StartedAt:      now,
		LastActivityAt: now,
		Model:          a.cfg.ModelName,
	}
	// The run is stored after the writes queued before it, and its position follows
	// theirs; the model is called while the run's row is on its way, and what the agent
	// emits waits in the inbox until the run is stored and chat.started has gone out.
	user := a.newMessage(info, parent, chat.RoleUser, chat.MessageComplete)
	user.Branch = chat.BranchOf(user.ID, append(slices.Clone(siblings), user.ID))
	user.Content = req.Content
	user.CreatedAt, user.UpdatedAt = now, now // the message is as old as its run
	run := newRunState(info)
	run.token = req.Token
	limit := a.runLimit()
	if !a.journal.requestsComplete || a.journal.q.Halted() || (limit > 0 && !a.cfg.RunCounts.clear(a.session.Owner, limit, now)) {
		// The database may refuse this start (a request id the actor cannot tell new,
		// an earlier write waiting for the database, the owner near the limit): the
		// model waits for its answer.
		run.stored = make(chan struct{})
	}
	a.startRunAgent(run, user, nil)
	active, counted, err := a.journal.startRun(info, user, limit)
	if limit > 0 && counted {
		a.cfg.RunCounts.counted(a.session.Owner, active, now) // activate counts this one
	}
	if err != nil {
		run.cancel() // not started: the agent's call ends, and what it emits is ignored
	} else if run.stored != nil {
		close(run.stored)
	}
	if errors.Is(err, store.ErrRunLimit) {
		return SendResult{}, a.runLimitError()
	}
	if errors.Is(err, store.ErrConflict) {
		if prev, e := a.journal.runByRequest(req.RequestID); e == nil {
			if prev.Status.Active() {
				// Stored as running, yet no agent drives it: a start whose answer was
				// lost. Start it now.
				return a.adopt(prev)
			}
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return SendResult{}, a.gone("store the message", err)
	}
	if err != nil {
		return SendResult{}, a.storageError("store the message", err)
	}
	if req.EditOf != nil {
		a.publishBranch(parent) // the path up to the edited message's parent
	}
	a.activate(run, user)
	return SendResult{RunID: runID, Status: chat.RunRunning}, nil
}

// runLimit is the most active runs the session's owner may have at once (0: no limit).
// The anonymous user, every client of a chatd without authentication, has none: one
// user's limit would be everyone's.
func (a *Actor) runLimit() int {
	if a.session == nil || a.session.Owner == "" {
		return 0
	}
	return a.cfg.MaxRunsPerUser
}

func (a *Actor) runLimitError() error {
	return errorf(CodeRateLimited, "too many active runs for this user (at most %d): wait for one to end, or cancel one", a.cfg.MaxRunsPerUser)
}

// begin makes run, stored, the active run: chat.started goes out and the agent starts
// with the session's history.
func (a *Actor) begin(run *runState, user chat.Message) {
	a.startRunAgent(run, user, nil)
	a.activate(run, user)
}

// activate makes run the active run and publishes chat.started: its agent's intents are
// handled from now on.
func (a *Actor) activate(run *runState, user chat.Message) {
	a.run = run
	a.countActive(run)
	a.publish(Event{Type: EventChatStarted, RunID: run.info.ID, RequestID: run.info.RequestID, Run: runView(run), Message: &user})
}

// startRunAgent starts run's agent on the conversation before user (and the checkpoint,
// for a continued run). The history is read on the agent's goroutine, with the writes
// queued now laid over it, so the actor goes on meanwhile; when it cannot be read the
// run fails as a storage error (a model that does not know the conversation would
// answer something else).
func (a *Actor) startRunAgent(run *runState, user chat.Message, checkpoint []chat.Message) {
	run.tail = &user.ID
	if len(checkpoint) > 0 {
		run.tail = &checkpoint[len(checkpoint)-1].ID
	}
	read := a.historyReader(user.ParentID)
	req := Request{SessionID: a.id, RunID: run.info.ID, RequestID: run.info.RequestID, Owner: a.session.Owner, Token: run.token, Content: user.Content, Checkpoint: checkpoint,
		AgentState: a.journal.agentStateReader()}
	a.startAgent(run, func() (Request, error) {
		history, err := read()
		if err != nil {
			return req, a.storageError("read the conversation", err)
		}
		req.History = history
		return req, nil
	})
}

// adopt starts a run that is stored as running but that no agent drives: its RunStart
// committed although the actor was told it failed, and the client has now retried.
func (a *Actor) adopt(prev chat.Run) (SendResult, error) {
	msgs, err := a.journal.messagesByRun(prev.ID)
	if err != nil {
		return SendResult{}, a.storageError("read the run", err)
	}
	if len(msgs) == 0 || msgs[0].Role != chat.RoleUser {
		return SendResult{}, errorf(CodeInternal, "run %s has no user message", prev.ID)
	}
	a.journal.reload() // positions moved under the actor
	if err := a.load(); err != nil {
		return SendResult{}, a.loadError(err)
	}
	a.logger().Warn().Str("run_id", prev.ID.String()).Msg("starting a run whose start was stored but reported as failed")
	prev.LastActivityAt = a.now()
	a.begin(newRunState(prev), msgs[0])
	return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
}

// ValidateSend checks a send as the actor will, for content of at most maxContent bytes
// (Config.MaxContentBytes): a transport that would create a session for it checks first,
// so that a refused send creates nothing.
func ValidateSend(req SendRequest, maxContent int) error {
	switch {
	case req.RequestID == "":
		return errorf(CodeBadRequest, "requestId is required")
	case !chat.ValidRequestID(req.RequestID):
		return errorf(CodeBadRequest, "requestId must be 1 to %d characters of valid UTF-8", chat.MaxRequestIDLen)
	case strings.TrimSpace(req.Content) == "":
		return errorf(CodeBadRequest, "content is empty")
	case len(req.Content) > maxContent:
		return errorf(CodeTooLarge, "content is %d bytes; the limit is %d", len(req.Content), maxContent)
	case strings.IndexByte(req.Content, 0) >= 0:
		return errorf(CodeBadRequest, "content contains a NUL character")
	case !utf8.ValidString(req.Content):
		return errorf(CodeBadRequest, "content is not valid UTF-8")
	case req.WhileRunning != "" && !req.WhileRunning.Valid():
		return errorf(CodeBadRequest, `whileRunning must be "queue", "steer", "interrupt" or "reject"`)
	}
	return nil
}

// doubleText is the policy of a send while a run is active: its own, or the actor's
// default.
func (a *Actor) doubleText(req SendRequest) chat.DoubleText {
	if req.WhileRunning != "" {
		return req.WhileRunning
	}
	return a.cfg.DoubleText
}

func (a *Actor) cancel(runID uuid.UUID) (CancelResult, error) {
	if err := a.takeUpLoaded(); err != nil {
		return CancelResult{}, err
	}
	run := a.run
	if run == nil {
		return CancelResult{}, errorf(CodeNoRun, "no run is active in this session")
	}
	if runID != uuid.Nil && runID != run.info.ID {
		return CancelResult{}, errorf(CodeNoRun, "run %s is not active", runID)
	}
	a.finish(run, chat.RunCancelled, nil, chat.CancelUser)
	return CancelResult{RunID: run.info.ID, Status: chat.RunCancelled}, nil
}

func (a *Actor) onRunEnd(run *runState, err error) {
	if !a.isCurrent(run) {
		return // already ended: cancelled, failed on a write, or interrupted
	}
	if err == nil {
		a.finish(run, chat.RunDone, nil, "")
		return
	}
	info := &chat.ErrorInfo{Code: CodeAgent, Message: chat.CleanText(err.Error())}
	if e := (*Error)(nil); errors.As(err, &e) {
		info = &chat.ErrorInfo{Code: e.Code, Message: chat.CleanText(e.Message)}
	}
	a.logger().Info().Str("run_id", run.info.ID.String()).Str("code", info.Code).Str("message", info.Message).Msg("agent failed")
	a.finish(run, chat.RunError, info, "")
}

// failStorage ends a run whose write failed: a run whose transcript cannot be stored
// must not go on as if it were.
func (a *Actor) failStorage(run *runState, op string, err error) {
	e := a.storageError(op, err)
	// storage whatever the database said (protocol.md: the transcript could not be
	// written); the message says whether it did not answer or refused.
	a.finish(run, chat.RunError, &chat.ErrorInfo{Code: CodeStorage, Message: e.Message}, "")
}

// finish ends the run: the open segment and running tools are closed with statuses that
// match how the run ended, the run is stored, and its terminal event is published. The
// agent's context is cancelled; anything it emits afterwards is ignored. reason says why a
// run was cancelled or interrupted ("" otherwise).
func (a *Actor) finish(run *runState, status chat.RunStatus, info *chat.ErrorInfo, reason chat.CancelReason) {
	run.cancel()
	a.run = nil
	a.lastCalls = run.calls
	if len(run.calls) == 0 {
		a.lastCalls = nil // an empty map, kept among the run's garbage, is not worth its span
	}
	clear(run.approvals) // the agent's waits end with its context

	msgStatus := map[chat.RunStatus]chat.MessageStatus{
		chat.RunDone:        chat.MessageComplete,
		chat.RunError:       chat.MessageError,
		chat.RunCancelled:   chat.MessageCancelled,
		chat.RunInterrupted: chat.MessageInterrupted,
	}[status]
	var errs []error
	var segErr *chat.ErrorInfo
	if status == chat.RunError {
		segErr = info
	}
	errs = append(errs, a.closeSegment(run, msgStatus, segErr))

	// Tool calls still running when the run ends did not finish.
	tools := make([]*liveMessage, 0, len(run.tools))
	for _, t := range run.tools {
		tools = append(tools, t)
	}
	slices.SortFunc(tools, func(x, y *liveMessage) int { return int(x.msg.Position - y.msg.Position) })
	for _, t := range tools {
		toolStatus, toolMsg, toolErr := chat.ToolCancelled, msgStatus, (*chat.ErrorInfo)(nil)
		switch status {
		case chat.RunDone:
			toolStatus, toolMsg = chat.ToolError, chat.MessageError
			toolErr = &chat.ErrorInfo{Code: "tool_unfinished", Message: "the run ended before this tool call did"}
		case chat.RunError:
			toolStatus, toolErr = chat.ToolError, info
		}
		errs = append(errs, a.endTool(run, t, toolMsg, toolStatus, t.buf.String(), toolErr))
	}

	now := a.now()
	errs = append(errs, a.journal.settle(run.info.ID, msgStatus, now))
	run.info.Status = status
	run.info.Error = info
	run.info.EndedAt = &now
	run.info.LastActivityAt = now
	run.info.CancelReason = reason
	run.info.PendingApproval = nil
	a.countActive(run)
	if d := a.cfg.Metrics.runDuration[status]; d != nil {
		d.Observe(now.Sub(run.info.StartedAt).Seconds())
	}
	// The end is stored behind the stream, like the writes before it (journal.Behind),
	// and the terminal event waits for the database's answer to it: a reader of the
	// database (the conversation list, another node) sees the run end when clients do.
	// It does not wait for a retry: a write that failed is kept, shown in snapshots and
	// retried, and a spinner that never stops is worse.
	errs = append(errs, a.journal.updateRun(run.info))
	a.journal.q.Await()
	if err := errors.Join(errs...); err != nil {
		a.logger().Error().Err(err).Str("run_id", run.info.ID.String()).Msg("store the end of a run")
	}

	typ := map[chat.RunStatus]EventType{
		chat.RunDone:        EventChatDone,
		chat.RunError:       EventChatError,
		chat.RunCancelled:   EventChatCancelled,
		chat.RunInterrupted: EventChatError,
	}[status]
	run.info = withResumable(run.info) // it is the session's latest run
	a.publish(a.runEvent(run, Event{Type: typ, Run: runView(run)}))
	a.requeueSteering() // what it did not take waits for a run of its own
}

// runEvent fills the fields every event of a run carries and touches its activity time.
func (a *Actor) runEvent(run *runState, ev Event) Event {
	run.info.LastActivityAt = a.now()
	ev.RunID = run.info.ID
	ev.RequestID = run.info.RequestID
	return ev
}

func runView(run *runState) *chat.Run {
	r := run.info
	return &r
}

// newRunMessage returns the next message of the session, belonging to run and following
// its last one on its branch (which it becomes).
func (a *Actor) newRunMessage(run *runState, role chat.Role, status chat.MessageStatus) chat.Message {
	m := a.newMessage(run.info, run.tail, role, status)
	if run.forks {
		run.forks = false
		if !sameID(run.tail, a.journal.leaf) {
			// Beside answers that the active path may show: see publishForked.
			a.forked = true
		}
	}
	run.tail = &m.ID
	return m
}

// newMessage returns the next message of the session, belonging to run, under parent.
func (a *Actor) newMessage(run chat.Run, parent *uuid.UUID, role chat.Role, status chat.MessageStatus) chat.Message {
	now := a.now()
	id := newID()
	return chat.Message{
		ID:        id,
		SessionID: a.id,
		RunID:     &run.ID,
		RequestID: run.RequestID,
		Position:  a.journal.position(),
		Role:      role,
		Kind:      chat.KindText,
		Status:    status,
		ParentID:  cloneID(parent),
		Branch:    a.journal.branchOf(id, parent),
		CreatedAt: now,
		UpdatedAt: now,
	}
}
