package aisdk

import (
	"encoding/json"
	"strings"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// done ends every stream: the SDK's end-of-stream marker.
const done = "data: [DONE]\n\n"

// encoder turns the events of one run into UI message stream chunks, as Server-Sent
// Events. It keeps what the events alone do not say (which segments are reasoning, what a
// tool has printed so far), so each stream has its own: one per connection, used only by
// the session's actor goroutine (catch-up and live events alike).
type encoder struct {
	run     uuid.UUID
	started bool
	ended   bool
	// active: the catch-up found the run still running; found: it found the run at all.
	// Written by the actor's goroutine, read by the handler's after the hello.
	active bool
	found  atomic.Bool
	kinds  map[uuid.UUID]chat.MessageKind // open segments
	output map[string]string              // tool call id → output so far
	asked  map[string]bool                // tool calls whose approval request was sent
	// answered: tool calls whose approval response was sent.
	answered map[string]bool
	// callIDs: tool message id → call id (tool.output events name the message).
	callIDs map[uuid.UUID]string
	// needsApproval names the tools whose calls wait for a person (nil: none): a
	// catch-up replays such a call's request and decision.
	needsApproval func(string) bool
	// continuation: the client has the run up to now (useChat sending an approval back
	// appends the answer to its message); a catch-up then starts with reset-step, which
	// drops the step the client has, and replays it.
	continuation bool
	// progress is the run's progress as last sent (data-progress), nil for none.
	progress *chat.Progress
	// awaitRequest, when set, is the requestId of a queued message: the stream is the
	// run it starts, whose id is not known yet (run is set from its chat.started).
	awaitRequest string
	// branched: the answer's branch point was sent (message-metadata).
	branched bool
	// part: the id of the text part a text segment streams into, when it is not the
	// segment's own: a segment that continues one a stopped process interrupted goes on
	// in that one's part. carry is the part such a segment left open ("" for none),
	// which the run's next text segment continues and anything else closes.
	part  map[uuid.UUID]uuid.UUID
	carry uuid.UUID
}

func newEncoder(run uuid.UUID) *encoder {
	return &encoder{run: run, kinds: map[uuid.UUID]chat.MessageKind{}, output: map[string]string{}, asked: map[string]bool{}, answered: map[string]bool{}, part: map[uuid.UUID]uuid.UUID{}}
}

// partID is the part message id's text streams into.
func (e *encoder) partID(id uuid.UUID) string {
	if p, ok := e.part[id]; ok {
		return p.String()
	}
	return id.String()
}

// closeCarry ends the part an interrupted segment left open: what follows is not its
// continuation.
func (e *encoder) closeCarry(c *chunks) {
	if e.carry == uuid.Nil {
		return
	}
	c.add(map[string]any{"type": "text-end", "id": e.carry.String()})
	e.carry = uuid.Nil
}

// chunks accumulates SSE lines.
type chunks struct{ b strings.Builder }

func (c *chunks) add(v map[string]any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{"type":"error","errorText":"chatd could not encode a part"}`)
	}
	c.b.WriteString("data: ")
	c.b.Write(data)
	c.b.WriteString("\n\n")
}

func (c *chunks) bytes() []byte { return []byte(c.b.String()) }

func (e *encoder) start(c *chunks) {
	if e.started {
		return
	}
	e.started = true
	c.add(map[string]any{"type": "start", "messageId": e.run.String()})
	c.add(map[string]any{"type": "start-step"})
}

// event encodes one live event (nothing for another run's, or after the end).
func (e *encoder) event(ev *conversation.Event) []byte {
	var c chunks
	if e.awaitRequest != "" {
		if ev.Type != conversation.EventChatStarted || ev.RequestID != e.awaitRequest {
			return nil // the queued message has not started its run yet
		}
		e.run, e.awaitRequest = ev.RunID, ""
	}
	if e.ended || (ev.RunID != uuid.Nil && ev.RunID != e.run) {
		return nil
	}
	switch ev.Type {
	case conversation.EventChatStarted:
		e.start(&c)
	case conversation.EventSegmentStarted:
		if ev.Message != nil {
			e.start(&c)
			e.branch(&c, *ev.Message)
			e.open(&c, *ev.Message)
		}
	case conversation.EventDelta:
		e.start(&c)
		if e.kinds[ev.MessageID] == chat.KindReasoning {
			c.add(map[string]any{"type": "reasoning-delta", "id": ev.MessageID.String(), "delta": ev.Text})
		} else {
			c.add(map[string]any{"type": "text-delta", "id": e.partID(ev.MessageID), "delta": ev.Text})
		}
	case conversation.EventSegmentEnded:
		e.close(&c, ev.MessageID)
	case conversation.EventToolStart, conversation.EventToolUpdate, conversation.EventToolEnd:
		if ev.Message != nil && ev.Message.Tool != nil {
			e.start(&c)
			e.branch(&c, *ev.Message)
			e.tool(&c, *ev.Message, ev.Type == conversation.EventToolStart)
		}
	case conversation.EventToolOutput:
		if id := e.callOf(ev); id != "" {
			e.output[id] += ev.Text
			c.add(map[string]any{"type": "tool-output-available", "toolCallId": id, "output": e.output[id], "preliminary": true})
		}
	case conversation.EventRunStatus:
		if ev.Run != nil && ev.Run.PendingApproval != nil {
			e.askApproval(&c, ev.Run.PendingApproval.ToolCallID)
		}
		if ev.Run != nil {
			e.sendProgress(&c, ev.Run.Progress)
		}
	case conversation.EventChatDone, conversation.EventChatError, conversation.EventChatCancelled:
		e.start(&c)
		e.end(&c, ev.Type, ev.Run)
	}
	return c.bytes()
}

// sendProgress sends the run's progress as a transient data-progress part (useChat's
// onData gets it; it is not kept in the message) when it changed since the last one.
func (e *encoder) sendProgress(c *chunks, p *chat.Progress) {
	if p == nil || (e.progress != nil && *e.progress == *p) {
		return
	}
	e.start(c)
	e.progress = p
	c.add(map[string]any{"type": "data-progress", "id": "progress", "transient": true,
		"data": map[string]any{"step": p.Step, "of": p.Of, "label": p.Label}})
}

// branch sends the branch point of the answer, when its first message is one of several
// alternatives (a regenerated answer): message-metadata with what the transcript has in
// the message's metadata, so that the message useChat assembles is the transcript's.
func (e *encoder) branch(c *chunks, m chat.Message) {
	if e.branched || m.Role == chat.RoleUser || m.Branch == nil {
		return
	}
	e.branched = true
	c.add(map[string]any{"type": "message-metadata", "messageMetadata": branchMeta(m.Branch)})
}

// callOf is the call id of a tool.output event's tool message.
func (e *encoder) callOf(ev *conversation.Event) string {
	if ev.Message != nil && ev.Message.Tool != nil {
		return ev.Message.Tool.CallID
	}
	return e.callIDs[ev.MessageID]
}

func (e *encoder) open(c *chunks, m chat.Message) {
	if m.Role != chat.RoleAssistant {
		return
	}
	e.kinds[m.ID] = m.Kind
	if m.Kind == chat.KindReasoning {
		e.closeCarry(c)
		c.add(map[string]any{"type": "reasoning-start", "id": m.ID.String()})
		return
	}
	if e.carry != uuid.Nil {
		// It continues the text a stopped process interrupted: the same part.
		e.part[m.ID], e.carry = e.carry, uuid.Nil
		return
	}
	c.add(map[string]any{"type": "text-start", "id": m.ID.String()})
}

// end1 ends segment id as it ended (status): a text segment a stopped process
// interrupted in a run that goes on leaves its part open for the continuation.
func (e *encoder) end1(c *chunks, id uuid.UUID, status chat.MessageStatus) {
	if kind, ok := e.kinds[id]; ok && kind != chat.KindReasoning && status == chat.MessageInterrupted && !e.ended {
		delete(e.kinds, id)
		p, _ := uuid.Parse(e.partID(id))
		e.carry = p
		return
	}
	e.close(c, id)
}

func (e *encoder) close(c *chunks, id uuid.UUID) {
	kind, ok := e.kinds[id]
	if !ok {
		return
	}
	delete(e.kinds, id)
	if kind == chat.KindReasoning {
		c.add(map[string]any{"type": "reasoning-end", "id": id.String()})
	} else {
		c.add(map[string]any{"type": "text-end", "id": e.partID(id)})
	}
}

// tool encodes a tool message in its current state; fresh is its start.
func (e *encoder) tool(c *chunks, m chat.Message, fresh bool) {
	t := m.Tool
	if e.callIDs == nil {
		e.callIDs = map[uuid.UUID]string{}
	}
	if _, seen := e.callIDs[m.ID]; !seen || fresh {
		e.callIDs[m.ID] = t.CallID
		c.add(map[string]any{"type": "tool-input-start", "toolCallId": t.CallID, "toolName": t.Name})
		c.add(map[string]any{"type": "tool-input-available", "toolCallId": t.CallID, "toolName": t.Name, "input": rawOrNull(t.Input)})
	}
	if t.Status != chat.ToolAwaitingApproval && e.asked[t.CallID] && !e.answered[t.CallID] {
		// The person decided (here or in another tab): the part shows the answer.
		e.answered[t.CallID] = true
		c.add(map[string]any{"type": "tool-approval-response", "approvalId": t.CallID, "approved": t.Status != chat.ToolDenied})
	}
	switch t.Status {
	case chat.ToolAwaitingApproval:
		e.askApproval(c, t.CallID)
	case chat.ToolOK:
		c.add(map[string]any{"type": "tool-output-available", "toolCallId": t.CallID, "output": deref(t.Output)})
	case chat.ToolDenied:
		c.add(map[string]any{"type": "tool-output-denied", "toolCallId": t.CallID})
	case chat.ToolError, chat.ToolCancelled:
		text := deref(t.Output)
		if m.Error != nil && m.Error.Message != "" {
			text = m.Error.Message
		}
		if text == "" {
			text = "the tool call " + string(t.Status)
		}
		c.add(map[string]any{"type": "tool-output-error", "toolCallId": t.CallID, "errorText": text})
	}
}

func (e *encoder) askApproval(c *chunks, callID string) {
	if e.asked[callID] {
		return
	}
	e.asked[callID] = true
	c.add(map[string]any{"type": "tool-approval-request", "approvalId": callID, "toolCallId": callID})
}

// end closes what is open and ends the stream as the run ended.
func (e *encoder) end(c *chunks, typ conversation.EventType, run *chat.Run) {
	for id := range e.kinds {
		e.close(c, id)
	}
	e.closeCarry(c)
	switch typ {
	case conversation.EventChatDone:
		c.add(map[string]any{"type": "finish-step"})
		c.add(map[string]any{"type": "finish", "finishReason": "stop"})
	case conversation.EventChatCancelled:
		c.add(map[string]any{"type": "abort", "reason": "the run was cancelled"})
	default:
		// chatd's code first, as in every error chatd sends the SDK: "<code>: <message>".
		text := "error: the run failed"
		if run != nil && run.Error != nil {
			text = run.Error.Code + ": " + run.Error.Message
		}
		c.add(map[string]any{"type": "error", "errorText": text})
	}
	c.b.WriteString(done)
	e.ended = true
}

// catchUp encodes the run from its start out of a snapshot: what it produced so far,
// and its end when it has ended. A replay (resumed) cannot happen: every stream says
// hello without an epoch.
func (e *encoder) catchUp(cu conversation.CatchUp) ([][]byte, error) {
	snap := cu.Snapshot
	if snap == nil {
		return nil, nil
	}
	if e.awaitRequest != "" {
		// The queued message's run may have started between the send and the hello.
		switch {
		case snap.ActiveRun != nil && snap.ActiveRun.RequestID == e.awaitRequest:
			e.run, e.awaitRequest = snap.ActiveRun.ID, ""
		case snap.LastRun != nil && snap.LastRun.RequestID == e.awaitRequest:
			e.run, e.awaitRequest = snap.LastRun.ID, ""
		default:
			e.found.Store(true) // its chat.started starts the stream
			return nil, nil
		}
	}
	var c chunks
	if e.continuation {
		// The client has the run's step so far and appends what comes: reset-step drops
		// it, and the replay gives it back as it is now, then the live events follow.
		if (snap.ActiveRun == nil || snap.ActiveRun.ID != e.run) && (snap.LastRun == nil || snap.LastRun.ID != e.run) {
			return nil, nil
		}
		c.add(map[string]any{"type": "start", "messageId": e.run.String()})
		c.add(map[string]any{"type": "reset-step"})
		e.started = true
	}
	return e.replay(cu, &c)
}

// replay encodes the run from its start into c out of the catch-up's snapshot.
func (e *encoder) replay(cu conversation.CatchUp, c *chunks) ([][]byte, error) {
	snap := cu.Snapshot
	var last *chat.Run
	switch {
	case snap.ActiveRun != nil && snap.ActiveRun.ID == e.run:
		e.active = true
	case snap.LastRun != nil && snap.LastRun.ID == e.run:
		last = snap.LastRun
	default:
		return nil, nil // not this run's: another is active, or it is older than the snapshot
	}
	e.found.Store(true)
	e.start(c)
	for _, m := range snap.Messages {
		if m.RunID == nil || *m.RunID != e.run || m.Role == chat.RoleUser {
			continue
		}
		e.branch(c, m)
		switch {
		case m.Tool != nil:
			e.closeCarry(c)
			if m.Tool.Output != nil && m.Tool.Status == chat.ToolRunning {
				e.output[m.Tool.CallID] = *m.Tool.Output
			}
			e.replayTool(c, m)
			if m.Tool.Status == chat.ToolRunning && m.Tool.Output != nil {
				c.add(map[string]any{"type": "tool-output-available", "toolCallId": m.Tool.CallID, "output": *m.Tool.Output, "preliminary": true})
			}
		case m.Role == chat.RoleAssistant && (m.Kind == chat.KindText || m.Kind == chat.KindReasoning || m.Kind == ""):
			if m.Content == "" && m.Status != chat.MessageStreaming && m.Kind != chat.KindReasoning {
				continue // it ended with no text: no part (as the transcript has it)
			}
			e.open(c, m)
			if m.Content != "" {
				if m.Kind == chat.KindReasoning {
					c.add(map[string]any{"type": "reasoning-delta", "id": m.ID.String(), "delta": m.Content})
				} else {
					c.add(map[string]any{"type": "text-delta", "id": e.partID(m.ID), "delta": m.Content})
				}
			}
			if m.Status != chat.MessageStreaming {
				e.end1(c, m.ID, m.Status)
			}
		}
	}
	if snap.ActiveRun != nil && snap.ActiveRun.PendingApproval != nil {
		e.askApproval(c, snap.ActiveRun.PendingApproval.ToolCallID)
	}
	if snap.ActiveRun != nil && snap.ActiveRun.ID == e.run {
		e.sendProgress(c, snap.ActiveRun.Progress)
	}
	if last != nil {
		typ := conversation.EventChatDone
		switch last.Status {
		case chat.RunCancelled:
			typ = conversation.EventChatCancelled
		case chat.RunError, chat.RunInterrupted:
			typ = conversation.EventChatError
		}
		e.end(c, typ, last)
	}
	return [][]byte{c.bytes()}, nil
}

// replayTool encodes a stored tool call: a call of a tool that needs approval and that was
// decided says its request and decision first, as the live stream did.
func (e *encoder) replayTool(c *chunks, m chat.Message) {
	t := m.Tool
	if e.needsApproval != nil && e.needsApproval(t.Name) && t.Status != chat.ToolAwaitingApproval {
		pending := *t
		pending.Status = chat.ToolAwaitingApproval
		waiting := m
		waiting.Tool = &pending
		e.tool(c, waiting, true)
		e.tool(c, m, false)
		return
	}
	e.tool(c, m, true)
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
