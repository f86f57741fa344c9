package conversation

import (
	"encoding/json"

	"github.com/chatd/chatd/chat"
)

// onToolStart starts a call the agent runs next. Its row is stored before the agent
// hears back (tool.start has gone out already): a call must not run unless the
// database knows it does, or a crash would run it again.
func (a *Actor) onToolStart(run *runState, call ToolCall) error {
	if _, err := a.startTool(run, call, chat.ToolRunning); err != nil {
		return err
	}
	if a.awaitStored(run, "store the tool call") != nil {
		return ErrRunEnded // the call does not run
	}
	return nil
}

// startTool validates and stores a new tool call with the given tool status, closing the
// open segment first, and publishes tool.start.
func (a *Actor) startTool(run *runState, call ToolCall, status chat.ToolStatus) (*liveMessage, error) {
	return a.startToolDecided(run, call, status, nil)
}

// startToolDecided is startTool for a call already decided (by an approval rule).
func (a *Actor) startToolDecided(run *runState, call ToolCall, status chat.ToolStatus, decision *chat.ToolDecision) (*liveMessage, error) {
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
	// Cleaned where it enters: what jsonb refuses (a NUL, a lone surrogate) becomes
	// U+FFFD, so clients are shown what is stored.
	if clean := chat.CleanJSON(input); clean != nil {
		input = clean
	}
	if err := chat.CheckToolInput(input); err != nil {
		return nil, errorf(CodeBadRequest, "tool call %q input: %v", call.ID, err)
	}
	if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
		a.failStorage(run, "store the reply", err)
		return nil, ErrRunEnded
	}
	tool := &liveMessage{msg: a.newRunMessage(run, chat.RoleTool, chat.MessageStreaming)}
	tool.log = a.journal.stream(tool.msg.ID)
	tool.msg.Tool = &chat.ToolCall{
		CallID:   call.ID,
		Name:     chat.CleanText(call.Name),
		Input:    input,
		Status:   status,
		Decision: decision,
	}
	if err := a.journal.insert(tool.msg); err != nil {
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
	text = tool.add(chat.CleanText(text))
	tool.log.Append(text)
	a.publish(a.runEvent(run, Event{Type: EventToolOutput, MessageID: tool.msg.ID, Text: text, src: &tool.buf}))
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
	if output == "" && res.Interrupted && tool.msg.Tool.Output != nil {
		output = *tool.msg.Tool.Output // what a process that died had streamed, as logged
	}
	status, msgErr := chat.ToolOK, (*chat.ErrorInfo)(nil)
	switch {
	case res.Interrupted:
		msg := "the call was running when the server stopped; whether it had any effect is unknown"
		if res.Err != nil {
			msg = chat.CleanText(res.Err.Error())
		}
		status, msgErr = chat.ToolInterrupted, &chat.ErrorInfo{Code: CodeInterrupted, Message: msg}
		if output == "" {
			output = msg
		}
	case res.Err != nil:
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
	err := a.journal.update(m, tool.log)
	a.publish(a.runEvent(run, Event{Type: EventToolEnd, Message: &m}))
	return err
}

// onNotice stores a complete system message of the run, after the open segment, and
// publishes it.
func (a *Actor) onNotice(run *runState, text string) error {
	if !a.isCurrent(run) {
		return ErrRunEnded
	}
	text = chat.CleanText(text)
	if text == "" {
		return errorf(CodeBadRequest, "a notice needs text")
	}
	if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
		a.failStorage(run, "store the reply", err)
		return ErrRunEnded
	}
	m := a.newRunMessage(run, chat.RoleSystem, chat.MessageComplete)
	m.Content = text
	if err := a.journal.insert(m); err != nil {
		a.failStorage(run, "store a notice", err)
		return ErrRunEnded
	}
	a.publish(a.runEvent(run, Event{Type: EventMessageAdded, Message: &m}))
	return nil
}
