package agent

import (
	"context"
	"encoding/json"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// resume continues a run from its checkpoint (conversation.Request.Checkpoint): what the
// run stored after its user message, before its process stopped. It appends the
// checkpoint's transcript to msgs, the conversation up to that user message, so the
// model sees its own earlier output and the results of the calls it made; those calls
// are never run again. Calls the checkpoint left unsettled are settled first, as their
// step would have settled them:
//   - one awaiting_approval waits for its decision (AwaitDecision) and runs if approved;
//   - one running was cut off with its process: a tool declared Idempotent runs it again
//     on the same call id, any other call is ended interrupted (InterruptedResult).
//
// It returns how many steps (model calls that asked for tools) the checkpoint holds,
// which count against MaxSteps, and the text to continue (ModelRequest.Continue) when the
// checkpoint ends with assistant text: the answer was cut off in it (or, rarely, right
// after it), and the model goes on from there. A checkpoint that ends in reasoning is
// left out of what the model sees from that reasoning on: the model thinks again. A run
// without a checkpoint returns 0 and "".
func (r *run) resume(ctx context.Context, msgs *[]Message) (steps int, cont string, err error) {
	r.reserveIDs(*msgs)
	cp := Transcript(r.req.Checkpoint)
	if n := len(cp); n > 0 && cp[n-1].Role == RoleAssistant && cp[n-1].Text == "" && len(cp[n-1].ToolCalls) == 0 {
		cp = cp[:n-1] // reasoning only: a step cut off before it said or called anything
	}
	r.reserveIDs(cp)
	for _, m := range cp {
		if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
			steps++
		}
	}
	if n := len(cp); n > 0 && cp[n-1].Role == RoleAssistant && len(cp[n-1].ToolCalls) == 0 {
		cont = cp[n-1].Text
	}

	// Only the last step can hold unsettled calls, and a step's calls run only once every
	// decision of the step is in: while one still waits, a call stored running was
	// approved and has not run yet (it is not cut off).
	stepWaits := false
	for _, m := range r.req.Checkpoint {
		if m.Role == chat.RoleTool && m.Tool != nil && m.Tool.Status == chat.ToolAwaitingApproval {
			stepWaits = true
		}
	}
	var open []*call
	for _, m := range r.req.Checkpoint {
		if m.Role != chat.RoleTool || m.Tool == nil {
			continue
		}
		if s := m.Tool.Status; s != chat.ToolRunning && s != chat.ToolAwaitingApproval {
			continue
		}
		c, err := r.reopen(m, stepWaits)
		if err != nil {
			return 0, "", err
		}
		open = append(open, c)
	}
	if len(open) > 0 {
		results, err := r.settle(ctx, open)
		if err != nil {
			return 0, "", err
		}
		byID := make(map[string]Message, len(results))
		for _, res := range results {
			byID[res.ToolCallID] = res
		}
		for i, m := range cp {
			if res, ok := byID[m.ToolCallID]; ok && m.Role == RoleTool {
				cp[i] = res // Transcript gave it a placeholder
			}
		}
	}
	*msgs = append(*msgs, cp...)
	return steps, cont, nil
}

// reopen takes up a call the checkpoint holds unsettled (m): one awaiting approval waits
// for its decision again; one running is set to run again when its tool is idempotent,
// and is ended interrupted otherwise.
//
// With notRunYet (another call of the step still waits for its decision), a running call
// was approved and never ran: it runs with the step.
func (r *run) reopen(m chat.Message, notRunYet bool) (*call, error) {
	c := &call{ToolCall: ToolCall{ID: m.Tool.CallID, Name: m.Tool.Name, Input: m.Tool.Input}}
	c.tool, c.spec, c.known = r.l.cfg.Tools.Lookup(c.Name)
	if len(c.Input) == 0 {
		c.Input = json.RawMessage("{}")
	}
	if m.Tool.Status == chat.ToolAwaitingApproval {
		var err error
		c.decision, err = r.out.AwaitDecision(c.ID)
		c.asked = m.CreatedAt
		return c, err
	}
	if notRunYet || (c.known && c.spec.Idempotent) {
		return c, nil // settle runs it, like any call that may run
	}
	var partial string
	if m.Tool.Output != nil {
		partial = *m.Tool.Output
	}
	c.settled = true
	c.result = Message{Role: RoleTool, ToolCallID: c.ID, ToolName: c.Name, Result: interruptedResult(partial), IsError: true}
	return c, r.out.ToolEnd(c.ID, conversation.ToolResult{Interrupted: true})
}
