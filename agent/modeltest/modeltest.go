// Package modeltest is a scripted agent.Model for tests: each call to the model plays the
// next Turn (events, then an error or success, optionally waiting on a gate first), and
// every request is recorded so tests can check what the loop sent.
package modeltest

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/chatd/chatd/agent"
)

// Turn is the model's answer to one call.
type Turn struct {
	// Before runs first; it may wait (on a gate, for ctx) or fail.
	Before func(ctx context.Context) error
	// Events are streamed in order.
	Events []agent.ModelEvent
	// Err is returned after the events.
	Err error
	// Hang waits for ctx after the events instead of returning.
	Hang bool
}

// Model plays turns in order.
type Model struct {
	mu       sync.Mutex
	turns    []Turn
	repeat   *Turn // played when the turns run out, if set
	requests []agent.ModelRequest
}

var _ agent.Model = (*Model)(nil)

// New returns a model that plays turns, then fails.
func New(turns ...Turn) *Model { return &Model{turns: turns} }

// Forever returns a model that plays turn on every call.
func Forever(turn Turn) *Model { return &Model{repeat: &turn} }

// ErrNoTurns is returned by a call beyond the script.
var ErrNoTurns = errors.New("modeltest: no turn left for this call")

// Stream plays the next turn.
func (m *Model) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	m.mu.Lock()
	m.requests = append(m.requests, clone(req))
	var t Turn
	switch {
	case len(m.turns) > 0:
		t, m.turns = m.turns[0], m.turns[1:]
	case m.repeat != nil:
		t = *m.repeat
	default:
		m.mu.Unlock()
		return &agent.ModelError{Code: "no_turn", Message: ErrNoTurns.Error()}
	}
	m.mu.Unlock()
	if t.Before != nil {
		if err := t.Before(ctx); err != nil {
			return err
		}
	}
	for _, ev := range t.Events {
		if err := emit(ev); err != nil {
			return err
		}
	}
	if t.Hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return t.Err
}

// Requests returns the requests made so far.
func (m *Model) Requests() []agent.ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]agent.ModelRequest(nil), m.requests...)
}

func clone(r agent.ModelRequest) agent.ModelRequest {
	r.Messages = append([]agent.Message(nil), r.Messages...)
	for i := range r.Messages {
		r.Messages[i].ToolCalls = append([]agent.ToolCall(nil), r.Messages[i].ToolCalls...)
	}
	return r
}

// Text returns text events.
func Text(pieces ...string) []agent.ModelEvent {
	evs := make([]agent.ModelEvent, len(pieces))
	for i, p := range pieces {
		evs[i] = agent.ModelEvent{Kind: agent.EventText, Text: p}
	}
	return evs
}

// Call returns a tool call event.
func Call(id, name, input string) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: agent.ToolCall{ID: id, Name: name, Input: json.RawMessage(input)}}
}

// Usage returns a usage event.
func Usage(in, out int64) agent.ModelEvent {
	return agent.ModelEvent{Kind: agent.EventUsage, Usage: agent.Usage{InputTokens: in, OutputTokens: out}}
}

// Say is a turn that answers with text.
func Say(pieces ...string) Turn { return Turn{Events: Text(pieces...)} }

// Transient returns a transient model error, as a 503 or a timeout would be.
func Transient(code string) error {
	return &agent.ModelError{Code: code, Message: "the model is temporarily unavailable", Transient: true}
}

// TransientAfter is Transient with a retry-after hint.
func TransientAfter(code string, after time.Duration) error {
	return &agent.ModelError{Code: code, Message: "the model is rate limited", Transient: true, RetryAfter: after}
}

// Permanent returns an error that no retry fixes, as a 400 would be.
func Permanent(code, message string) error {
	return &agent.ModelError{Code: code, Message: message}
}

// Events joins event lists.
func Events(lists ...[]agent.ModelEvent) []agent.ModelEvent {
	var out []agent.ModelEvent
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}
