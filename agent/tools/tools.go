// Package tools holds chatd's built-in tools: current_time, harmless and always on, and
// shell, which runs a command in the session's sandbox and needs a person's approval.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
)

// CurrentTime tells the time, in UTC or a named time zone.
type CurrentTime struct {
	Clock clockwork.Clock // defaults to the real clock
}

// Spec describes current_time.
func (CurrentTime) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "current_time",
		Description: "Returns the current date and time, in UTC or in an IANA time zone such as Europe/Paris.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string","description":"IANA time zone name; UTC when omitted"}},"additionalProperties":false}`),
		// Reading the clock changes nothing: a call cut off by a restart is read again.
		Idempotent: true,
	}
}

// Run returns the time as RFC 3339 with the weekday.
func (t CurrentTime) Run(_ context.Context, input json.RawMessage, _ agent.Env) (string, error) {
	var in struct {
		Timezone string `json:"timezone"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("input must be an object with an optional timezone: %w", err)
	}
	loc := time.UTC
	if in.Timezone != "" {
		l, err := time.LoadLocation(in.Timezone)
		if err != nil {
			return "", fmt.Errorf("unknown time zone %q", in.Timezone)
		}
		loc = l
	}
	clock := t.Clock
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	now := clock.Now().In(loc)
	return now.Format("Monday, " + time.RFC3339), nil
}

// Shell runs a shell command in the session's sandbox. Every call needs approval.
type Shell struct {
	// Timeout is the longest a command may run; calls may ask for less. Default 2m.
	Timeout time.Duration
}

// DefaultShellTimeout is Shell's default time limit.
const DefaultShellTimeout = 2 * time.Minute

// Spec describes shell.
func (s Shell) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: "shell",
		Description: "Runs a command with /bin/sh in the session's sandbox (a working directory kept between " +
			"calls) and returns its output and exit code. A person approves every call before it runs.",
		InputSchema:   json.RawMessage(`{"type":"object","properties":{"command":{"type":"string"},"timeout_seconds":{"type":"integer","minimum":1}},"required":["command"],"additionalProperties":false}`),
		NeedsApproval: true,
	}
}

// Run runs the command, streaming its output, and returns the output with the exit code.
func (s Shell) Run(ctx context.Context, input json.RawMessage, env agent.Env) (string, error) {
	var in struct {
		Command        string `json:"command"`
		TimeoutSeconds int    `json:"timeout_seconds"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return "", fmt.Errorf("input must be {\"command\": \"...\"}: %w", err)
	}
	if strings.TrimSpace(in.Command) == "" {
		return "", errors.New("command is empty")
	}
	limit := s.Timeout
	if limit <= 0 {
		limit = DefaultShellTimeout
	}
	if in.TimeoutSeconds > 0 && in.TimeoutSeconds < int(limit/time.Second) {
		// Compared in seconds: a huge value must not overflow into "no limit".
		limit = time.Duration(in.TimeoutSeconds) * time.Second
	}
	sb, err := env.Sandbox(ctx)
	if err != nil {
		return "", err
	}
	// A sandbox that cuts the output itself sends the head, its marker and the tail,
	// which the tail kept here has room for: only one marker is ever shown.
	var kept bytes.Buffer
	out := &sandbox.HeadTail{Head: shellKeep / 2, Tail: shellKeep/2 + sandbox.MaxMarker, Out: &kept}
	res, err := sb.Exec(ctx, sandbox.ExecRequest{
		Command:     in.Command,
		Timeout:     limit,
		Output:      io.MultiWriter(out, env.Output()),
		OutputLimit: shellKeep,
	})
	_ = out.Close() // into kept, which takes all
	text := kept.String()
	if err != nil {
		return text, err
	}
	switch {
	case res.TimedOut:
		return text, fmt.Errorf("the command was stopped after %s", limit)
	case res.Exceeded != "" && res.ExitCode == -1:
		return text, fmt.Errorf("the command was stopped at a limit of the sandbox: %s", res.Exceeded)
	case res.Exceeded != "":
		return text + fmt.Sprintf("\n[exit code %d]", res.ExitCode), fmt.Errorf("the command exited with code %d at a limit of the sandbox: %s", res.ExitCode, res.Exceeded)
	case res.ExitCode != 0:
		return text + fmt.Sprintf("\n[exit code %d]", res.ExitCode), fmt.Errorf("the command exited with code %d", res.ExitCode)
	}
	return text + "\n[exit code 0]", nil
}

// shellKeep is how much of a command's output Shell keeps for its result, its first half
// and its last (the loop caps results further, keeping both ends too); the middle of a
// longer output is counted, not kept, so a chatty command cannot exhaust memory, and its
// end, where exit statuses and last errors are, survives.
const shellKeep = 1 << 20
