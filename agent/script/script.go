// Package script is a deterministic agent for tests. A script is a list of steps (text,
// tool events, failures, pauses on a gate the test controls); the agent plays them in
// order through the real Emitter, so tests drive the actor's real code paths.
package script

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chatd/chatd/conversation"
)

// Step is one thing the agent does.
type Step func(ctx context.Context, out conversation.Emitter) error

// Agent plays a script for each run.
type Agent struct {
	script func(req conversation.Request) []Step
}

var _ conversation.Agent = (*Agent)(nil)

// New returns an agent that plays steps for every run.
func New(steps ...Step) *Agent {
	return &Agent{script: func(conversation.Request) []Step { return steps }}
}

// PerRun returns an agent that asks script for the steps of each run.
func PerRun(script func(req conversation.Request) []Step) *Agent {
	return &Agent{script: script}
}

// Run plays the steps and returns the first error, including the emitter's ErrRunEnded.
func (a *Agent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	for _, step := range a.script(req) {
		if err := step(ctx, out); err != nil {
			return err
		}
	}
	return nil
}

// Text emits each delta as one text event.
func Text(deltas ...string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		for _, d := range deltas {
			if err := out.Text(d); err != nil {
				return err
			}
		}
		return nil
	}
}

// Words emits n deltas "w1", " w2", ... " wn": text whose length grows with n.
func Words(n int) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		for i := 1; i <= n; i++ {
			d := fmt.Sprintf(" w%d", i)
			if i == 1 {
				d = d[1:]
			}
			if err := out.Text(d); err != nil {
				return err
			}
		}
		return nil
	}
}

// ToolStart starts tool call id with a JSON input.
func ToolStart(id, name, input string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		return out.ToolStart(conversation.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)})
	}
}

// ToolOutput streams output of tool call id.
func ToolOutput(id string, chunks ...string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		for _, c := range chunks {
			if err := out.ToolOutput(id, c); err != nil {
				return err
			}
		}
		return nil
	}
}

// ToolEnd ends tool call id successfully with output.
func ToolEnd(id, output string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		return out.ToolEnd(id, conversation.ToolResult{Output: output})
	}
}

// ToolFail ends tool call id as failed.
func ToolFail(id, message string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		return out.ToolEnd(id, conversation.ToolResult{Err: errors.New(message)})
	}
}

// Tool is a whole tool call: start, then end with output.
func Tool(id, name, input, output string) Step {
	return Seq(ToolStart(id, name, input), ToolEnd(id, output))
}

// Seq runs steps in order as one step.
func Seq(steps ...Step) Step {
	return func(ctx context.Context, out conversation.Emitter) error {
		for _, s := range steps {
			if err := s(ctx, out); err != nil {
				return err
			}
		}
		return nil
	}
}

// Fail ends the run with an error of the given code.
func Fail(code, message string) Step {
	return func(context.Context, conversation.Emitter) error {
		return &conversation.Error{Code: code, Message: message}
	}
}

// FailPlain ends the run with an error that has no code.
func FailPlain(message string) Step {
	return func(context.Context, conversation.Emitter) error { return errors.New(message) }
}

// Panic panics inside the agent.
func Panic(v any) Step {
	return func(context.Context, conversation.Emitter) error { panic(v) }
}

// Hang waits until the run is cancelled and returns the context's error.
func Hang() Step {
	return func(ctx context.Context, _ conversation.Emitter) error {
		<-ctx.Done()
		return ctx.Err()
	}
}

// Gate pauses an agent until the test lets it through. Each Pass lets exactly one waiting
// step through and returns only once it has gone through, so the test also knows the
// agent got that far.
type Gate struct{ ch chan struct{} }

// NewGate returns a closed gate.
func NewGate() *Gate { return &Gate{ch: make(chan struct{})} }

// Wait is the step that waits at the gate.
func (g *Gate) Wait() Step {
	return func(ctx context.Context, _ conversation.Emitter) error {
		select {
		case <-g.ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Pass lets one waiting step through. It fails when ctx ends first.
func (g *Gate) Pass(ctx context.Context) error {
	select {
	case g.ch <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gate: no agent arrived: %w", ctx.Err())
	}
}

// Joined returns the text Words(n) produces.
func Joined(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "w%d", i)
	}
	return b.String()
}

// Approval asks for approval of tool call id and waits for the decision. Approved, it
// ends the call with output; denied, it goes on (the actor ended the call). decided, when
// not nil, receives the decision.
func Approval(id, name, input, output string, decided chan<- conversation.Decision) Step {
	return func(ctx context.Context, out conversation.Emitter) error {
		ch, err := out.AwaitApproval(conversation.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)})
		if err != nil {
			return err
		}
		select {
		case d := <-ch:
			if decided != nil {
				decided <- d
			}
			if d.Approved {
				return out.ToolEnd(id, conversation.ToolResult{Output: output})
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AwaitOnly asks for approval of tool call id and returns at once, leaving the call
// pending: a later step (or none) deals with the decision.
func AwaitOnly(id, name, input string, decisions *<-chan conversation.Decision) Step {
	return func(ctx context.Context, out conversation.Emitter) error {
		ch, err := out.AwaitApproval(conversation.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)})
		if decisions != nil {
			*decisions = ch
		}
		return err
	}
}

// Paused reports the run paused (as the loop does after the approval timeout).
func Paused() Step {
	return func(_ context.Context, out conversation.Emitter) error { return out.Paused() }
}

// Reasoning streams one reasoning block and closes it with providerData (a signature).
func Reasoning(providerData string, deltas ...string) Step {
	return func(_ context.Context, out conversation.Emitter) error {
		for _, d := range deltas {
			if err := out.Reasoning(d); err != nil {
				return err
			}
		}
		var data json.RawMessage
		if providerData != "" {
			data = json.RawMessage(providerData)
		}
		return out.EndReasoning(data)
	}
}
