package agui

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// event is an AG-UI event, every type's fields in one struct (core's events, 1.0).
type event struct {
	Type            string          `json:"type"`
	MessageID       string          `json:"messageId"`
	Role            string          `json:"role"`
	Delta           json.RawMessage `json:"delta"` // a string; STATE_DELTA's is a JSON Patch
	ToolCallID      string          `json:"toolCallId"`
	ToolCallName    string          `json:"toolCallName"`
	ParentMessageID string          `json:"parentMessageId"`
	Content         json.RawMessage `json:"content"` // TOOL_CALL_RESULT's: a string, or parts
	StepName        string          `json:"stepName"`
	Snapshot        json.RawMessage `json:"snapshot"`
	Message         string          `json:"message"`
	Code            string          `json:"code"`
	Outcome         *struct {
		Type       string `json:"type"`
		Interrupts []struct {
			ID         string `json:"id"`
			Reason     string `json:"reason"`
			Message    string `json:"message"`
			ToolCallID string `json:"toolCallId"`
		} `json:"interrupts"`
	} `json:"outcome"`
	Usage []struct {
		InputTokens  int64 `json:"inputTokens"`
		OutputTokens int64 `json:"outputTokens"`
	} `json:"usage"`
}

// call is a tool call of the turn.
type call struct {
	id, name string
	args     strings.Builder
	msg      int // the assistant message it belongs to, in turnState.msgs
	// started: ToolStart was called (when its result came); resulted: it has one.
	started, resulted bool
}

// turnState is what one AG-UI run of the agent streamed: the messages it adds to the
// conversation, and the calls it left to chatd.
type turnState struct {
	r    *run
	msgs []message
	byID map[string]int // an assistant message's id → its index in msgs
	// textIDs are the ids of text messages seen; a message of another role than
	// assistant is false (ignored).
	textIDs   map[string]bool
	lastText  string
	calls     map[string]*call
	order     []*call
	chunkCall *call // the call TOOL_CALL_CHUNKs go to
	reasoning bool  // a reasoning block is open
	streamed  bool

	pending    []conversation.ToolCall
	interrupts map[string]string // a pending call's id → the interrupt that names it
}

// handle handles one event's data; done at RUN_FINISHED.
func (t *turnState) handle(data []byte) (done bool, err error) {
	var ev event
	if err := json.Unmarshal(data, &ev); err != nil || ev.Type == "" {
		return false, badResponse("the agent sent an event that is not AG-UI JSON: %.200q", data)
	}
	t.streamed = true
	out := t.r.out
	if ev.Type != "TOOL_CALL_CHUNK" {
		t.chunkCall = nil
	}
	switch ev.Type {
	case "TEXT_MESSAGE_START":
		if err := t.endReasoning(); err != nil {
			return false, err
		}
		t.textIDs[ev.MessageID] = ev.Role == "" || ev.Role == "assistant"
		t.lastText = ev.MessageID
	case "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK":
		id := ev.MessageID
		if id == "" {
			id = t.lastText
		}
		if ok, seen := t.textIDs[id]; seen && !ok || ev.Role != "" && ev.Role != "assistant" {
			t.textIDs[id] = false
			return false, nil // another role's text: not the assistant's reply
		}
		t.textIDs[id], t.lastText = true, id
		delta := str(ev.Delta)
		if delta == "" {
			return false, nil
		}
		if err := t.endReasoning(); err != nil {
			return false, err
		}
		if err := out.Text(delta); err != nil {
			return false, err
		}
		t.text(id, delta)
	case "TEXT_MESSAGE_END":
	case "REASONING_MESSAGE_CONTENT", "REASONING_MESSAGE_CHUNK", "THINKING_TEXT_MESSAGE_CONTENT":
		if delta := str(ev.Delta); delta != "" {
			if err := out.Reasoning(delta); err != nil {
				return false, err
			}
			t.reasoning = true
		}
	case "REASONING_MESSAGE_END", "REASONING_END", "THINKING_TEXT_MESSAGE_END", "THINKING_END":
		if err := t.endReasoning(); err != nil {
			return false, err
		}
	case "REASONING_START", "REASONING_MESSAGE_START", "THINKING_START", "THINKING_TEXT_MESSAGE_START":
	case "TOOL_CALL_START":
		if err := t.startCall(ev.ToolCallID, ev.ToolCallName, ev.ParentMessageID); err != nil {
			return false, err
		}
	case "TOOL_CALL_CHUNK":
		if ev.ToolCallID != "" && (t.chunkCall == nil || t.chunkCall.id != ev.ToolCallID) {
			if t.calls[ev.ToolCallID] == nil {
				if err := t.startCall(ev.ToolCallID, ev.ToolCallName, ev.ParentMessageID); err != nil {
					return false, err
				}
			}
			t.chunkCall = t.calls[ev.ToolCallID]
		}
		if t.chunkCall != nil {
			t.chunkCall.args.WriteString(str(ev.Delta))
		}
	case "TOOL_CALL_ARGS":
		if c := t.calls[ev.ToolCallID]; c != nil {
			c.args.WriteString(str(ev.Delta))
		}
	case "TOOL_CALL_END":
	case "TOOL_CALL_RESULT":
		return false, t.result(ev)
	case "STEP_STARTED":
		t.r.started++
		return false, t.r.progress(ev.StepName)
	case "STEP_FINISHED":
		t.r.finished++
		t.r.started = max(t.r.started, t.r.finished)
		return false, t.r.progress(ev.StepName)
	case "STATE_SNAPSHOT":
		if len(ev.Snapshot) > 0 {
			return false, t.r.setState(ev.Snapshot)
		}
	case "STATE_DELTA":
		var ops []patchOp
		if err := json.Unmarshal(ev.Delta, &ops); err != nil {
			return false, badResponse("the agent sent a STATE_DELTA that is not a JSON Patch: %v", err)
		}
		state := t.r.state
		if len(state) == 0 {
			state = json.RawMessage("{}")
		}
		next, err := applyPatch(state, ops)
		if err != nil {
			// As AG-UI's own client does: the delta is dropped, the run goes on.
			t.r.log.Warn().Err(err).Msg("agui: the agent's STATE_DELTA does not apply to its state")
			return false, nil
		}
		return false, t.r.setState(next)
	case "RUN_ERROR":
		msg := ev.Message
		if msg == "" {
			msg = "the agent failed"
		}
		if ev.Code != "" {
			t.r.log.Info().Str("agui_code", ev.Code).Str("message", msg).Msg("agui: the agent's run failed")
		}
		return false, &conversation.Error{Code: conversation.CodeAgent, Message: msg}
	case "RUN_FINISHED":
		return true, t.finish(ev)
	default:
		// RUN_STARTED, MESSAGES_SNAPSHOT, ACTIVITY_*, RAW, CUSTOM, SUBAGENT_*,
		// REASONING_ENCRYPTED_VALUE, and types of later versions: nothing for chatd.
	}
	return false, nil
}

// text adds delta to the turn's assistant message id.
func (t *turnState) text(id, delta string) {
	i, ok := t.byID[id]
	if !ok {
		t.msgs = append(t.msgs, message{ID: id, Role: "assistant", Content: ptr("")})
		i = len(t.msgs) - 1
		t.byID[id] = i
	}
	if t.msgs[i].Content == nil {
		t.msgs[i].Content = ptr("")
	}
	*t.msgs[i].Content += delta
}

func (t *turnState) endReasoning() error {
	if !t.reasoning {
		return nil
	}
	t.reasoning = false
	return t.r.out.EndReasoning(nil)
}

// startCall takes up a call: its assistant message is its parentMessageId's, else the
// turn's last message when that is the assistant's, else a new one.
func (t *turnState) startCall(id, name, parent string) error {
	if err := t.endReasoning(); err != nil {
		return err
	}
	if id == "" || t.calls[id] != nil {
		return badResponse("the agent started a tool call with no id, or one it already started (%q)", id)
	}
	c := &call{id: id, name: name, msg: -1}
	if i, ok := t.byID[parent]; ok && parent != "" {
		c.msg = i
	} else if n := len(t.msgs); parent == "" && n > 0 && t.msgs[n-1].Role == "assistant" {
		c.msg = n - 1
	} else {
		mid := parent
		if mid == "" {
			mid = "calls-" + id
		}
		t.msgs = append(t.msgs, message{ID: mid, Role: "assistant"})
		c.msg = len(t.msgs) - 1
		t.byID[mid] = c.msg
	}
	t.calls[id] = c
	t.order = append(t.order, c)
	return nil
}

func (c *call) toolCall() conversation.ToolCall {
	in := json.RawMessage(c.args.String())
	switch {
	case len(in) == 0:
		in = json.RawMessage("{}")
	case !json.Valid(in):
		in, _ = json.Marshal(c.args.String()) // kept, as a string, rather than lost
	}
	return conversation.ToolCall{ID: c.id, Name: c.name, Input: in}
}

// result records a call the agent ran itself: it starts now, and ends with its result.
// A call the turn resumed (carried) ends with it, unless a denial ended it already.
func (t *turnState) result(ev event) error {
	if cr := t.r.carried[ev.ToolCallID]; cr != nil && t.calls[ev.ToolCallID] == nil {
		if cr.resulted {
			t.r.log.Warn().Str("tool_call_id", ev.ToolCallID).Msg("agui: a second TOOL_CALL_RESULT for a resumed call, ignored")
			return nil
		}
		if err := t.endReasoning(); err != nil {
			return err
		}
		content := resultText(ev.Content)
		if !cr.ended {
			if err := t.r.out.ToolEnd(ev.ToolCallID, conversation.ToolResult{Output: content}); err != nil {
				return err
			}
			cr.ended = true
		}
		cr.resulted = true
		t.addResult(ev.MessageID, ev.ToolCallID, content)
		return nil
	}
	c := t.calls[ev.ToolCallID]
	if c == nil || c.resulted {
		t.r.log.Warn().Str("tool_call_id", ev.ToolCallID).Msg("agui: a TOOL_CALL_RESULT for no call of the turn, ignored")
		return nil
	}
	if err := t.endReasoning(); err != nil {
		return err
	}
	content := resultText(ev.Content)
	if !c.started {
		if err := t.r.out.ToolStart(c.toolCall()); err != nil {
			return err
		}
		c.started = true
	}
	c.resulted = true
	if err := t.r.out.ToolEnd(c.id, conversation.ToolResult{Output: content}); err != nil {
		return err
	}
	t.addResult(ev.MessageID, c.id, content)
	return nil
}

// addResult adds call's tool message to the turn's messages: id is the agent's message
// id for it, "" for one of chatd's making.
func (t *turnState) addResult(id, call, content string) {
	if id == "" {
		id = "result-" + call
	}
	t.msgs = append(t.msgs, message{ID: id, Role: "tool", ToolCallID: call, Content: ptr(content)})
}

// resultText is a TOOL_CALL_RESULT's content as text: the string, or the text parts of
// a list of content parts.
func resultText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			if p.Type == "text" {
				b.WriteString(p.Text)
			}
		}
		return b.String()
	}
	return string(raw)
}

// finish ends the turn at RUN_FINISHED: its calls go into their messages, the ones
// without a result are left to chatd (pending), and its usage is reported.
func (t *turnState) finish(ev event) error {
	if err := t.endReasoning(); err != nil {
		return err
	}
	// A resumed call the agent gave no result for ends with its decision, whose tool
	// message answers it in the requests after this one (first: it answers an earlier
	// message).
	var answers []message
	for id, cr := range t.r.carried {
		if cr.resulted {
			continue
		}
		content := approvalContent(cr.decision)
		if !cr.ended {
			if err := t.r.out.ToolEnd(id, conversation.ToolResult{Output: content}); err != nil {
				return err
			}
			cr.ended = true
		}
		cr.resulted = true
		answers = append(answers, message{ID: "result-" + id, Role: "tool", ToolCallID: id, Content: ptr(content)})
	}
	if len(answers) > 0 {
		slices.SortFunc(answers, func(a, b message) int { return strings.Compare(a.ID, b.ID) })
		t.msgs = append(answers, t.msgs...)
		for id, i := range t.byID {
			t.byID[id] = i + len(answers)
		}
		for _, c := range t.order {
			c.msg += len(answers)
		}
	}
	for _, c := range t.order {
		tc := c.toolCall()
		args := c.args.String() // as the agent wrote them, even when they are not JSON
		if args == "" {
			args = "{}"
		}
		m := &t.msgs[c.msg]
		m.ToolCalls = append(m.ToolCalls, toolCall{ID: c.id, Type: "function", Function: functionCall{Name: c.name, Arguments: args}})
		if !c.resulted {
			t.pending = append(t.pending, tc)
		}
	}
	if ev.Outcome != nil && ev.Outcome.Type == "interrupt" {
		t.interrupts = map[string]string{}
		for _, in := range ev.Outcome.Interrupts {
			if c := t.calls[in.ToolCallID]; c != nil && !c.resulted {
				t.interrupts[c.id] = in.ID
				continue
			}
			what := in.Message
			if what == "" {
				what = in.Reason
			}
			return &conversation.Error{Code: conversation.CodeAgent, Message: "the agent asks for input chatd cannot give (an interrupt not tied to a tool call): " + what}
		}
	}
	if len(ev.Usage) > 0 {
		var u conversation.Usage
		for _, e := range ev.Usage {
			u.InputTokens += e.InputTokens
			u.OutputTokens += e.OutputTokens
			u.ContextTokens = max(u.ContextTokens, e.InputTokens)
		}
		if err := t.r.out.Usage(u); err != nil {
			return err
		}
	}
	return nil
}

// setState makes s the run's state: sent with its next turn, and stored.
func (r *run) setState(s json.RawMessage) error {
	r.state = append(json.RawMessage(nil), s...)
	return r.storeState()
}

// storeState stores the run's state, with the interrupts of the calls that wait.
func (r *run) storeState() error {
	err := r.out.State(wrapState(r.state, r.interrupts))
	var e *conversation.Error
	if errors.As(err, &e) && e.Code == conversation.CodeBadRequest {
		return badResponse("the agent's state cannot be kept: %s", e.Message)
	}
	return err
}

// progress reports the run's steps: those finished of those seen so far, labelled with
// the step's name (made a valid label). A refused report is logged; the run goes on.
func (r *run) progress(name string) error {
	of := min(max(r.started, 1), chat.MaxProgressSteps)
	step := min(r.finished, of)
	err := r.out.Progress(step, of, label(name))
	if err != nil && isEmitErr(err) {
		r.log.Warn().Err(err).Msg("agui: progress refused")
		return nil
	}
	return err
}

// label makes s a progress label: valid UTF-8, one line without control characters, at
// most chat.MaxProgressLabel characters.
func label(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.TrimSpace(s)
	if utf8.RuneCountInString(s) > chat.MaxProgressLabel {
		s = string([]rune(s)[:chat.MaxProgressLabel])
	}
	return s
}

// str decodes a JSON string ("" for anything else).
func str(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}
