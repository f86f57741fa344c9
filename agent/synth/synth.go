// Package synth is a model for benchmarks: it streams numbered tokens at a set rate, each
// stamped with the wall-clock time it was due, so a client on the same machine can
// measure delivery latency token by token and check that none is lost, repeated or out
// of order. It runs through the real agent loop like any provider.
//
// The user message sets the run, as space-separated key=value words (others are ignored):
//
//	tokens=N  tokens to stream in the whole run (default 100)
//	rate=R    tokens per second; 0 streams as fast as possible (default 50)
//	tools=K   current_time calls spread evenly through the run (default 0), so a run has
//	          K+1 text segments and K tool calls
//
// Token i is " i:t" (a space, its index from 0, a colon, a time in Unix nanoseconds),
// e.g. " 41:1763712000123456789". The time is when the token was due by the rate's
// schedule (when it was emitted, for rate=0), so a client's arrival time minus it counts
// every delay, including one that held up the model itself: no coordinated omission. The text of a run is therefore the
// concatenation of those tokens in order, whatever the segments.
package synth

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/chatd/chatd/agent"
)

// Defaults and bounds of a run's settings.
const (
	DefaultTokens = 100
	DefaultRate   = 50
	MaxTokens     = 10_000_000
	MaxRate       = 1_000_000
	MaxTools      = 100
)

// ToolName is the tool the model calls for tools=K.
const ToolName = "current_time"

// Spec is what a user message asks of a run.
type Spec struct {
	Tokens int
	Rate   int
	Tools  int
}

// ParseSpec reads a run's settings from a user message, bounded to the limits above.
func ParseSpec(content string) Spec {
	s := Spec{Tokens: DefaultTokens, Rate: DefaultRate}
	for _, f := range strings.Fields(content) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "tokens":
			s.Tokens = min(n, MaxTokens)
		case "rate":
			s.Rate = min(n, MaxRate)
		case "tools":
			s.Tools = min(n, MaxTools)
		}
	}
	return s
}

// Token formats token i emitted at t.
func Token(i int, t time.Time) string {
	b := make([]byte, 0, 32)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, t.UnixNano(), 10)
	return string(b)
}

// Model is the synthetic model. Its zero value is ready.
type Model struct {
	// Now stamps tokens; defaults to time.Now. The stamp must be wall-clock time a client
	// on the same machine can compare with its own.
	Now func() time.Time
}

var _ agent.Model = (*Model)(nil)

// Stream streams the part of the run that belongs to this step: with K tools, step j
// (j tool results after the last user message) streams tokens [j·N/(K+1), (j+1)·N/(K+1))
// and, unless it is the last step, ends with a tool call. Tokens keep to the run's
// schedule (token i at start + i/rate), so a slow consumer makes no later token late
// by more than it is itself.
func (m *Model) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	now := m.Now
	if now == nil {
		now = time.Now
	}
	user, step := -1, 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			user = i
			break
		}
	}
	if user < 0 {
		return &agent.ModelError{Code: "bad_request", Message: "the synthetic model needs a user message"}
	}
	for _, msg := range req.Messages[user+1:] {
		if msg.Role == agent.RoleTool {
			step++
		}
	}
	spec := ParseSpec(req.Messages[user].Text)
	steps := spec.Tools + 1
	from, to := step*spec.Tokens/steps, (step+1)*spec.Tokens/steps
	if step >= steps {
		from, to = spec.Tokens, spec.Tokens
	}

	start := now()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for i := from; i < to; i++ {
		stamp := now()
		if spec.Rate > 0 {
			due := start.Add(time.Duration(i-from) * time.Second / time.Duration(spec.Rate))
			// The stamp is when the token was due, not when it got out: a token held up
			// because emit blocked (a full inbox) is late by that much too.
			stamp = due
			if wait := due.Sub(now()); wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				select {
				case <-timer.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := emit(agent.ModelEvent{Kind: agent.EventText, Text: Token(i, stamp)}); err != nil {
			return err
		}
	}
	if step < spec.Tools {
		input, _ := json.Marshal(map[string]int{"step": step})
		id := "synth-" + strconv.FormatInt(start.UnixNano(), 36) + "-" + strconv.Itoa(step)
		call := agent.ToolCall{ID: id, Name: ToolName, Input: input}
		if err := emit(agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: call}); err != nil {
			return err
		}
	}
	return emit(agent.ModelEvent{Kind: agent.EventUsage, Usage: agent.Usage{InputTokens: int64(len(req.Messages)), OutputTokens: int64(to - from)}})
}
