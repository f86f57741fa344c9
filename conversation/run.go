package conversation

import (
	"context"
	"encoding/json"
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
	info   chat.Run
	ctx    context.Context
	cancel context.CancelFunc

	seg       *liveMessage             // the open assistant segment (text or reasoning)
	tools     map[string]*liveMessage  // running tool calls by call id
	calls     map[string]bool          // every call id the run has used
	approvals map[string]chan Decision // calls waiting for a decision, by call id

	// lostInsert is set when an insert failed: it may have committed anyway, leaving a
	// row the actor does not know of, which the end of the run settles.
	lostInsert bool
	// counted is the status the run is counted under in chatd_runs_active, "" for none.
	counted chat.RunStatus
}

func newRunState(info chat.Run) *runState {
	ctx, cancel := context.WithCancel(context.Background())
	return &runState{
		info:      info,
		ctx:       ctx,
		cancel:    cancel,
		tools:     make(map[string]*liveMessage),
		calls:     make(map[string]bool),
		approvals: make(map[string]chan Decision),
	}
}

// liveMessage is a stored message whose text is still growing in memory: an open
// segment's content, or a running tool's streamed output.
type liveMessage struct {
	msg chat.Message
	buf strings.Builder
}

// view returns the message as a client should see it now.
func (l *liveMessage) view() chat.Message {
	m := l.msg
	if m.Tool != nil {
		tool := *m.Tool
		if l.buf.Len() > 0 {
			out := l.buf.String()
			tool.Output = &out
		}
		m.Tool = &tool
	} else {
		m.Content = l.buf.String()
	}
	return m
}

// overlay replaces stored rows with what clients were told: the live view of an open
// segment or running tool, and rows whose last update the database has not taken yet.
func (a *Actor) overlay(msgs []chat.Message) {
	for i := range msgs {
		if m, ok := a.unsavedMsgs[msgs[i].ID]; ok {
			msgs[i] = m
		}
		if a.run != nil {
			if l := a.run.live(msgs[i].ID); l != nil {
				msgs[i] = l.view()
			}
		}
	}
}

func (r *runState) live(id uuid.UUID) *liveMessage {
	if r.seg != nil && r.seg.msg.ID == id {
		return r.seg
	}
	for _, t := range r.tools {
		if t.msg.ID == id {
			return t
		}
	}
	return nil
}

func (a *Actor) isCurrent(run *runState) bool { return run != nil && a.run == run }

func (a *Actor) send(req SendRequest) (SendResult, error) {
	if err := validateSend(req, a.cfg.MaxContentBytes); err != nil {
		return SendResult{}, err
	}
	if err := a.load(); err != nil {
		return SendResult{}, a.storageError("load the session", err)
	}
	if a.session == nil {
		return SendResult{}, errorf(CodeNotFound, "the session does not exist")
	}
	if a.run != nil {
		if a.run.info.RequestID == req.RequestID {
			return SendResult{RunID: a.run.info.ID, Duplicate: true, Status: a.run.info.Status}, nil
		}
		// A retry of an older request is still a duplicate, not a second run.
		if prev, err := a.runByRequest(req.RequestID); err == nil {
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
		return SendResult{}, errorf(CodeRunActive, "run %s is still active in this session", a.run.info.ID)
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
	user := a.newRunMessage(info, chat.RoleUser, chat.MessageComplete)
	user.Content = req.Content
	user.CreatedAt, user.UpdatedAt = now, now // the message is as old as its run
	ctx, cancel := dbContext()
	err := a.cfg.Store.RunStart(ctx, info, user)
	cancel()
	if err != nil && !errors.Is(err, store.ErrConflict) {
		// The statement may have committed before its answer was lost.
		if prev, e := a.runByRequest(req.RequestID); e == nil && prev.ID == runID {
			err = nil
		}
	}
	if errors.Is(err, store.ErrConflict) {
		if prev, e := a.runByRequest(req.RequestID); e == nil {
			if prev.Status.Active() {
				// Stored as running, yet no agent drives it: a start whose answer was
				// lost. Start it now.
				return a.adopt(prev)
			}
			return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
		}
	}
	if err != nil {
		// Whatever happened, the next message's position must be read again.
		a.loaded = false
		return SendResult{}, a.storageError("store the message", err)
	}
	a.nextPos++
	a.begin(newRunState(info), user)
	return SendResult{RunID: runID, Status: chat.RunRunning}, nil
}

// begin makes run the active run: chat.started goes out and the agent starts with the
// session's history.
func (a *Actor) begin(run *runState, user chat.Message) {
	a.run = run
	a.countActive(run)
	a.publish(Event{Type: EventChatStarted, RunID: run.info.ID, RequestID: run.info.RequestID, Run: runView(run), Message: &user})
	ctx, cancel := dbContext()
	history, _, err := a.cfg.Store.MessagesBefore(ctx, a.id, user.Position, a.cfg.HistoryMessages)
	cancel()
	if err != nil {
		// A model that does not know the conversation would answer something else.
		a.failStorage(run, "read the conversation", err)
		return
	}
	a.overlay(history)
	a.startAgent(run, Request{SessionID: a.id, RunID: run.info.ID, RequestID: run.info.RequestID, Content: user.Content, History: history})
}

// adopt starts a run that is stored as running but that no agent drives: its RunStart
// committed although the actor was told it failed, and the client has now retried.
func (a *Actor) adopt(prev chat.Run) (SendResult, error) {
	ctx, cancel := dbContext()
	msgs, err := a.cfg.Store.MessagesByRun(ctx, prev.ID)
	cancel()
	if err != nil {
		return SendResult{}, a.storageError("read the run", err)
	}
	if len(msgs) == 0 || msgs[0].Role != chat.RoleUser {
		return SendResult{}, errorf(CodeInternal, "run %s has no user message", prev.ID)
	}
	a.loaded = false // positions moved under the actor
	if err := a.load(); err != nil {
		return SendResult{}, a.storageError("load the session", err)
	}
	a.logger().Warn().Str("run_id", prev.ID.String()).Msg("starting a run whose start was stored but reported as failed")
	prev.LastActivityAt = a.now()
	a.begin(newRunState(prev), msgs[0])
	return SendResult{RunID: prev.ID, Duplicate: true, Status: prev.Status}, nil
}

func validateSend(req SendRequest, maxContent int) error {
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
	}
	return nil
}

func (a *Actor) runByRequest(requestID string) (chat.Run, error) {
	for _, r := range a.unsavedRuns {
		if r.RequestID == requestID {
			return r, nil
		}
	}
	ctx, cancel := dbContext()
	defer cancel()
	return a.cfg.Store.RunByRequest(ctx, a.id, requestID)
}

func (a *Actor) cancel(runID uuid.UUID) (CancelResult, error) {
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

// startAgent runs the agent in its own goroutine; what it emits comes back as intents.
func (a *Actor) startAgent(run *runState, req Request) {
	a.runs.Add(1)
	go func() {
		defer a.runs.Done()
		err := a.callAgent(run, req)
		select {
		case a.inbox <- &runEndIntent{run, err}:
		case <-a.done:
		}
	}()
}

func (a *Actor) callAgent(run *runState, req Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			a.logger().Error().Str("run_id", run.info.ID.String()).Interface("panic", p).Msg("agent panicked")
			err = errorf(CodeInternal, "the agent crashed")
		}
	}()
	return a.cfg.Agent.Run(run.ctx, req, &emitter{a: a, run: run})
}

type (
	textIntent struct {
		run  *runState
		text string
	}
	toolStartIntent struct {
		run   *runState
		call  ToolCall
		reply chan error
	}
	toolOutputIntent struct {
		run          *runState
		callID, text string
	}
	toolEndIntent struct {
		run    *runState
		callID string
		result ToolResult
		reply  chan error
	}
	runEndIntent struct {
		run *runState
		err error
	}
	reasoningIntent struct {
		run          *runState
		text         string
		providerData json.RawMessage
		end          bool
	}
)

// emitter is the Emitter of one run: it turns calls into intents for the actor.
type emitter struct {
	a   *Actor
	run *runState
}

func (e *emitter) Text(delta string) error {
	if delta == "" {
		return nil
	}
	return e.post(&textIntent{e.run, delta})
}

func (e *emitter) Reasoning(delta string) error {
	if delta == "" {
		return nil
	}
	return e.post(&reasoningIntent{e.run, delta, nil, false})
}

func (e *emitter) EndReasoning(providerData json.RawMessage) error {
	return e.post(&reasoningIntent{e.run, "", providerData, true})
}

func (e *emitter) ToolStart(call ToolCall) error {
	reply := make(chan error, 1)
	return e.call(&toolStartIntent{e.run, call, reply}, reply)
}

func (e *emitter) ToolOutput(callID, text string) error {
	if text == "" {
		return nil
	}
	return e.post(&toolOutputIntent{e.run, callID, text})
}

func (e *emitter) ToolEnd(callID string, result ToolResult) error {
	reply := make(chan error, 1)
	return e.call(&toolEndIntent{e.run, callID, result, reply}, reply)
}

func (e *emitter) AwaitApproval(call ToolCall) (<-chan Decision, error) {
	reply := make(chan result[<-chan Decision], 1)
	if err := e.post(&approvalIntent{e.run, call, reply}); err != nil {
		return nil, err
	}
	select {
	case r := <-reply:
		return r.val, r.err
	case <-e.run.ctx.Done():
		return nil, ErrRunEnded
	case <-e.a.done:
		return nil, ErrStopped
	}
}

func (e *emitter) Paused() error {
	reply := make(chan error, 1)
	return e.call(&pausedIntent{e.run, false, reply}, reply)
}

func (e *emitter) Resumed() error {
	reply := make(chan error, 1)
	return e.call(&pausedIntent{e.run, true, reply}, reply)
}

func (e *emitter) Usage(u Usage) error {
	return e.post(&usageIntent{e.run, u})
}

func (e *emitter) post(it intent) error {
	if e.run.ctx.Err() != nil {
		return ErrRunEnded
	}
	select {
	case e.a.inbox <- it:
		return nil
	case <-e.run.ctx.Done():
		return ErrRunEnded
	case <-e.a.done:
		return ErrStopped
	}
}

func (e *emitter) call(it intent, reply chan error) error {
	if err := e.post(it); err != nil {
		return err
	}
	select {
	case err := <-reply:
		return err
	case <-e.run.ctx.Done():
		return ErrRunEnded
	case <-e.a.done:
		return ErrStopped
	}
}

func (a *Actor) onText(run *runState, text string) {
	if !a.isCurrent(run) {
		return
	}
	if !a.openSegment(run, chat.KindText) {
		return
	}
	a.appendDelta(run, chat.CleanText(text))
}

func (a *Actor) onReasoning(run *runState, it *reasoningIntent) {
	if !a.isCurrent(run) {
		return
	}
	if it.text != "" || (it.end && (run.seg == nil || run.seg.msg.Kind != chat.KindReasoning)) {
		if !a.openSegment(run, chat.KindReasoning) {
			return
		}
	}
	if it.text != "" {
		a.appendDelta(run, chat.CleanText(it.text))
	}
	if it.end {
		if len(it.providerData) > 0 && json.Valid(it.providerData) {
			run.seg.msg.ProviderData = it.providerData
		}
		if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
			a.failStorage(run, "store the reasoning", err)
		}
	}
}

// openSegment makes sure an assistant segment of kind is open: another kind's segment is
// closed first (a boundary, like a tool call). It reports false when the run failed.
func (a *Actor) openSegment(run *runState, kind chat.MessageKind) bool {
	if run.seg != nil && run.seg.msg.Kind == kind {
		return true
	}
	if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
		a.failStorage(run, "store the reply", err)
		return false
	}
	seg := &liveMessage{msg: a.newRunMessage(run.info, chat.RoleAssistant, chat.MessageStreaming)}
	seg.msg.Kind = kind
	if err := a.insert(run, seg.msg); err != nil {
		a.failStorage(run, "store the reply", err)
		return false
	}
	run.seg = seg
	m := seg.msg
	a.publish(a.runEvent(run, Event{Type: EventSegmentStarted, Message: &m}))
	return true
}

func (a *Actor) onToolStart(run *runState, call ToolCall) error {
	_, err := a.startTool(run, call, chat.ToolRunning)
	return err
}

// startTool validates and stores a new tool call with the given tool status, closing the
// open segment first, and publishes tool.start.
func (a *Actor) startTool(run *runState, call ToolCall, status chat.ToolStatus) (*liveMessage, error) {
	if !a.isCurrent(run) {
		return nil, ErrRunEnded
	}
	switch {
	case !chat.ValidToolCallID(call.ID):
		return nil, errorf(CodeBadRequest, "a tool call needs an id of 1 to 256 bytes of UTF-8 text")
	case run.calls[call.ID]:
		return nil, errorf(CodeConflict, "tool call %q was already started in this run", call.ID)
	case !chat.ValidToolName(call.Name):
		return nil, errorf(CodeBadRequest, "tool call %q: a tool name is 1 to %d letters, digits, _ or -", call.ID, chat.MaxToolNameLen)
	}
	input := call.Input
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	if err := chat.CheckToolInput(input); err != nil {
		return nil, errorf(CodeBadRequest, "tool call %q input: %v", call.ID, err)
	}
	if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
		a.failStorage(run, "store the reply", err)
		return nil, ErrRunEnded
	}
	tool := &liveMessage{msg: a.newRunMessage(run.info, chat.RoleTool, chat.MessageStreaming)}
	tool.msg.Tool = &chat.ToolCall{
		CallID: call.ID,
		Name:   chat.CleanText(call.Name),
		Input:  input,
		Status: status,
	}
	if err := a.insert(run, tool.msg); err != nil {
		a.failStorage(run, "store the tool call", err)
		return nil, ErrRunEnded
	}
	run.calls[call.ID] = true
	run.tools[call.ID] = tool
	m := tool.view()
	a.publish(a.runEvent(run, Event{Type: EventToolStart, Message: &m}))
	return tool, nil
}

func (a *Actor) onToolOutput(run *runState, callID, text string) {
	if !a.isCurrent(run) {
		return
	}
	tool := run.tools[callID]
	if tool == nil {
		a.logger().Warn().Str("call_id", callID).Msg("agent sent output for a tool call that is not running")
		return
	}
	text = chat.CleanText(text)
	tool.buf.WriteString(text)
	a.publish(a.runEvent(run, Event{Type: EventToolOutput, MessageID: tool.msg.ID, Text: text}))
}

func (a *Actor) onToolEnd(run *runState, callID string, res ToolResult) error {
	if !a.isCurrent(run) {
		return ErrRunEnded
	}
	tool := run.tools[callID]
	if tool == nil {
		return errorf(CodeNotFound, "tool call %q is not running", callID)
	}
	output := chat.CleanText(res.Output)
	if output == "" {
		output = tool.buf.String()
	}
	status, msgErr := chat.ToolOK, (*chat.ErrorInfo)(nil)
	if res.Err != nil {
		status = chat.ToolError
		msgErr = &chat.ErrorInfo{Code: "tool_error", Message: chat.CleanText(res.Err.Error())}
		if output == "" {
			output = msgErr.Message
		}
	}
	if err := a.endTool(run, tool, chat.MessageComplete, status, output, msgErr); err != nil {
		a.failStorage(run, "store the tool result", err)
		return ErrRunEnded
	}
	return nil
}

// endTool stores a tool call's end and publishes tool.end.
func (a *Actor) endTool(run *runState, tool *liveMessage, msgStatus chat.MessageStatus, status chat.ToolStatus, output string, msgErr *chat.ErrorInfo) error {
	delete(run.tools, tool.msg.Tool.CallID)
	m := tool.msg
	t := *m.Tool
	t.Output = &output
	t.Status = status
	m.Tool = &t
	m.Status = msgStatus
	m.Error = msgErr
	m.UpdatedAt = a.now()
	err := a.update(m)
	a.publish(a.runEvent(run, Event{Type: EventToolEnd, Message: &m}))
	return err
}

// closeSegment writes the open segment's content, once, and publishes its end.
func (a *Actor) closeSegment(run *runState, status chat.MessageStatus, msgErr *chat.ErrorInfo) error {
	seg := run.seg
	if seg == nil {
		return nil
	}
	a.flushDelta() // the stored content is every delta's text, held text included
	run.seg = nil
	m := seg.view()
	m.Status = status
	m.Error = msgErr
	m.UpdatedAt = a.now()
	err := a.update(m)
	a.publish(a.runEvent(run, Event{Type: EventSegmentEnded, MessageID: m.ID, Status: status, Error: msgErr}))
	return err
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
	a.finish(run, chat.RunError, &chat.ErrorInfo{Code: e.Code, Message: e.Message}, "")
}

// finish ends the run: the open segment and running tools are closed with statuses that
// match how the run ended, the run is stored, and its terminal event is published. The
// agent's context is cancelled; anything it emits afterwards is ignored. reason says why a
// run was cancelled or interrupted ("" otherwise).
func (a *Actor) finish(run *runState, status chat.RunStatus, info *chat.ErrorInfo, reason chat.CancelReason) {
	run.cancel()
	a.run = nil
	a.lastCalls = run.calls
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
	if run.lostInsert {
		ctx, cancel := dbContext()
		_, err := a.cfg.Store.MessagesSettleRun(ctx, run.info.ID, msgStatus, now)
		cancel()
		errs = append(errs, err)
	}
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
	errs = append(errs, a.updateRun(run.info))
	if err := errors.Join(errs...); err != nil {
		// The terminal event still goes out: the writes that failed are kept, shown in
		// snapshots and retried, and a spinner that never stops is worse.
		a.logger().Error().Err(err).Str("run_id", run.info.ID.String()).Msg("store the end of a run")
	}

	typ := map[chat.RunStatus]EventType{
		chat.RunDone:        EventChatDone,
		chat.RunError:       EventChatError,
		chat.RunCancelled:   EventChatCancelled,
		chat.RunInterrupted: EventChatError,
	}[status]
	a.publish(a.runEvent(run, Event{Type: typ, Run: runView(run)}))
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

// newRunMessage returns the next message of the session, belonging to run.
func (a *Actor) newRunMessage(run chat.Run, role chat.Role, status chat.MessageStatus) chat.Message {
	now := a.now()
	return chat.Message{
		ID:        newID(),
		SessionID: a.id,
		RunID:     &run.ID,
		RequestID: run.RequestID,
		Position:  a.nextPos,
		Role:      role,
		Kind:      chat.KindText,
		Status:    status,
		CreatedAt: now,
		UpdatedAt: now,
	}
}

// insert stores a new message of run. A failure may still have committed, so the next
// position is read again and the end of the run settles rows it did not track.
func (a *Actor) insert(run *runState, m chat.Message) error {
	ctx, cancel := dbContext()
	defer cancel()
	if err := a.cfg.Store.MessageInsert(ctx, m); err != nil {
		a.loaded = false
		run.lostInsert = true
		return err
	}
	a.nextPos++
	return nil
}

// update stores a message's new state. When the database fails, the state is kept and
// retried: clients have been (or are about to be) told of it.
func (a *Actor) update(m chat.Message) error {
	ctx, cancel := dbContext()
	defer cancel()
	if err := a.cfg.Store.MessageUpdate(ctx, m, chat.MessageStreaming); err != nil {
		a.unsavedMsgs[m.ID] = m
		a.scheduleRetry()
		return err
	}
	delete(a.unsavedMsgs, m.ID)
	return nil
}

// updateRun is update for runs.
func (a *Actor) updateRun(r chat.Run) error {
	ctx, cancel := dbContext()
	defer cancel()
	if err := a.cfg.Store.RunUpdate(ctx, r, chat.ActiveRunStatuses()...); err != nil {
		a.unsavedRuns[r.ID] = r
		a.scheduleRetry()
		return err
	}
	delete(a.unsavedRuns, r.ID)
	return nil
}
