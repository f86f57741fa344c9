// Package demo is chatd's embedded default: a model that needs no network, driven by the
// real agent loop. It streams a deterministic reply word by word at a set pace, so a
// newcomer can watch a run stream, disconnect, reconnect and catch up. A message with the
// word "tool" makes it call current_time half way through ("tools": twice, at a third and
// two thirds); one with "approve" makes it
// call demo_sandbox, a tool that needs approval and runs a fixed, harmless command in the
// session's sandbox, so the approval prompt, the pause after the approval timeout and the
// resume are visible too. One with the word "steps" reports the run's progress as it
// goes, "step 3 of 7" (ProgressSteps steps over the reply), so a long run's progress is
// visible in every tab, the conversation list and after a restart. A run continued after a restart picks its reply up where it
// was cut off, mid-word if need be, and ends with the text an uninterrupted run has.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/sandbox"
)

// Defaults used by cmd/chatd (CHATD_DEMO_WORDS, CHATD_DEMO_DELAY).
const (
	DefaultWords = 60
	DefaultDelay = 30 * time.Millisecond
)

// Tool names the demo model calls.
const (
	// ToolName is the tool a message with "tool" gets: the built-in current_time.
	ToolName = "current_time"
	// ApprovalToolName is the approval-gated tool a message with "approve" gets.
	ApprovalToolName = "demo_sandbox"
)

// ProgressSteps is how many steps a reply to a message with "steps" reports, and
// ProgressLabel what it calls them.
const (
	ProgressSteps = 7
	ProgressLabel = "demo steps"
)

// Config sets the demo's length and pace.
type Config struct {
	// Words is the length of a reply in words (at least 1).
	Words int
	// Delay is the pause before each word; 0 streams as fast as possible.
	Delay time.Duration
	// Clock paces the words. Defaults to the real clock.
	Clock clockwork.Clock
}

// Model is the demo model.
type Model struct {
	cfg Config
}

var _ agent.Model = (*Model)(nil)

// NewModel returns the demo model.
func NewModel(cfg Config) *Model {
	if cfg.Words < 1 {
		cfg.Words = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Model{cfg: cfg}
}

// filler is what the demo says after its opening; it cycles for long replies.
var filler = strings.Fields(`chatd keeps this run going on the server whether or not
any tab is watching. Close the tab, lose the network or refresh the page, then say hello
again with the epoch and lastSeq you last saw: you are caught up to the exact word and
follow the live stream from there. Every reply is stored in segments, never token by
token, so the database stays quiet while the words flow.`)

// Reply returns the words the demo streams for a message, in order: n words, and then
// the rest of the sentence the nth word is in, so that a reply does not look cut off (a
// newcomer would take it for lost text). An n shorter than the opening cuts it.
func Reply(content string, n int) []string {
	words := strings.Fields(fmt.Sprintf("Demo reply to %q.", quote(content)))
	if len(words) >= n {
		return words[:n]
	}
	// The filler ends with a sentence, so this ends within one round of it.
	for i := 0; len(words) < n || !strings.HasSuffix(words[len(words)-1], "."); i++ {
		words = append(words, filler[i%len(filler)])
	}
	return words
}

// quote shortens a message to its first few words.
func quote(content string) string {
	f := strings.Fields(content)
	if len(f) > 6 {
		return strings.Join(f[:6], " ") + "…"
	}
	return strings.Join(f, " ")
}

// MentionsTool reports whether a message asks for a tool call: it has the word "tool".
func MentionsTool(content string) bool { return hasWord(content, "tool") }

// MentionsTools reports whether a message asks for two tool calls: it has the word
// "tools".
func MentionsTools(content string) bool { return hasWord(content, "tools") }

// MentionsSteps reports whether a message asks for progress reports: it has the word
// "steps".
func MentionsSteps(content string) bool { return hasWord(content, "steps") }

// MentionsApprove reports whether a message asks for an approval: it has the word
// "approve".
func MentionsApprove(content string) bool { return hasWord(content, "approve") }

func hasWord(content, word string) bool {
	for _, w := range strings.FieldsFunc(content, func(r rune) bool { return !unicode.IsLetter(r) }) {
		if strings.EqualFold(w, word) {
			return true
		}
	}
	return false
}

// Stream answers: the reply cut in as many steps as the user's message asks for tool
// calls (one, or two for "tools"), each step but the last ending in a call and each after
// the first opening with what the previous call said; otherwise the whole reply.
//
// The reply depends on the user's message alone, so a run continued from its checkpoint
// (see agent.ModelRequest.Continue) ends as an uninterrupted one would: the assistant
// text the request already holds for the current step (the text after the user's
// message, or after the tool's result) is the start of what the demo would say there,
// and it streams only the rest, starting mid-word when the text was cut mid-word. A call
// whose result the request holds is not made again: the demo is past it.
func (m *Model) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	if len(req.Messages) == 0 {
		return &agent.ModelError{Code: "bad_request", Message: "the demo model needs a message"}
	}
	turn := 0 // the user's message
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == agent.RoleUser {
			turn = i
			break
		}
	}
	user := req.Messages[turn].Text
	words := Reply(user, m.cfg.Words)

	// The calls the message asks for, made at even cuts of the reply.
	var calls []agent.ToolCall
	switch {
	case MentionsApprove(user):
		input, _ := json.Marshal(map[string]string{"reason": quote(user)})
		calls = []agent.ToolCall{{ID: "demo-approval", Name: ApprovalToolName, Input: input}}
	case MentionsTools(user):
		calls = []agent.ToolCall{
			{ID: "demo-time-1", Name: ToolName, Input: json.RawMessage(`{}`)},
			{ID: "demo-time-2", Name: ToolName, Input: json.RawMessage(`{}`)},
		}
	case MentionsTool(user):
		calls = []agent.ToolCall{{ID: "demo-time", Name: ToolName, Input: json.RawMessage(`{}`)}}
	}
	if len(words) <= len(calls) {
		calls = nil // too short a reply to cut
	}
	cut := func(step int) int { return step * len(words) / (len(calls) + 1) }

	// The step: how many of its calls' results the request holds. said is what it
	// already holds of the step's text (after the user's message, or the last result).
	var result *agent.Message
	step := 0
	var said strings.Builder
	for i := turn + 1; i < len(req.Messages); i++ {
		switch msg := req.Messages[i]; {
		case msg.Role == agent.RoleTool:
			result = &req.Messages[i]
			step++
			said.Reset()
		case msg.Role == agent.RoleAssistant:
			said.WriteString(msg.Text)
		}
	}
	step = min(step, len(calls))

	stream := words[cut(step):cut(step+1)]
	if result != nil {
		stream = append([]string{toolSentence(*result)}, stream...)
	}
	var call *agent.ToolCall
	if step < len(calls) {
		call = &calls[step]
	}
	pieces := make([]string, len(stream))
	for i, w := range stream {
		if i > 0 || result != nil {
			w = " " + w
		}
		pieces[i] = w
	}
	left := rest(pieces, said.String())

	// With "steps", the progress is the share of the reply's words said, in
	// ProgressSteps steps: reported when it changes, from where a continued run is.
	steps := MentionsSteps(user)
	first := cut(step) + len(pieces) - len(left) // the reply's index of left[0]
	if result != nil {
		first-- // pieces open with the tool's sentence, not one of the reply's words
	}
	reported := -1
	progress := func(i int) error {
		if !steps {
			return nil
		}
		n := min(ProgressSteps, max(0, i)*ProgressSteps/len(words))
		if n == reported {
			return nil
		}
		reported = n
		return emit(agent.ModelEvent{Kind: agent.EventProgress, Progress: agent.Progress{Step: n, Of: ProgressSteps, Label: ProgressLabel}})
	}
	for i, p := range left {
		if err := progress(first + i); err != nil {
			return err
		}
		if err := m.pause(ctx); err != nil {
			return err
		}
		if err := emit(agent.ModelEvent{Kind: agent.EventText, Text: p}); err != nil {
			return err
		}
	}
	if call == nil {
		if err := progress(len(words)); err != nil { // the whole reply: the last step
			return err
		}
	}
	pieces = left
	if call != nil {
		if err := emit(agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: *call}); err != nil {
			return err
		}
	}
	return emit(agent.ModelEvent{Kind: agent.EventUsage, Usage: agent.Usage{
		InputTokens:  int64(countWords(req.Messages)),
		OutputTokens: int64(len(pieces)),
	}})
}

// rest returns the pieces that follow said, when said is how they begin: the piece
// said ends in is cut where it stopped. Text that is not their beginning (the demo was
// configured otherwise when it was said) does not stop the demo: it says the step
// whole.
func rest(pieces []string, said string) []string {
	if said == "" || !strings.HasPrefix(strings.Join(pieces, ""), said) {
		return pieces
	}
	for i, p := range pieces {
		if len(said) < len(p) {
			return append([]string{p[len(said):]}, pieces[i+1:]...)
		}
		said = said[len(p):]
	}
	return nil
}

// toolSentence opens the answer after a tool call with what the tool said.
func toolSentence(m agent.Message) string {
	first, _, _ := strings.Cut(strings.TrimSpace(m.Result), "\n")
	if m.IsError {
		return fmt.Sprintf("(%s did not run: %s)", m.ToolName, first)
	}
	return fmt.Sprintf("(%s said: %s)", m.ToolName, first)
}

func countWords(msgs []agent.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.Text)) + len(strings.Fields(m.Result))
	}
	return n
}

func (m *Model) pause(ctx context.Context) error {
	if m.cfg.Delay <= 0 {
		return ctx.Err()
	}
	select {
	case <-m.cfg.Clock.After(m.cfg.Delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SandboxTool is demo_sandbox: it needs approval, then runs a fixed, harmless command in
// the session's sandbox and streams its output.
type SandboxTool struct{}

// Spec describes demo_sandbox.
func (SandboxTool) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:          ApprovalToolName,
		Description:   "Says hello from the session's sandbox: prints the working directory, the date and the files there. Needs approval.",
		InputSchema:   json.RawMessage(`{"type":"object","properties":{"reason":{"type":"string"}}}`),
		NeedsApproval: true,
	}
}

// demoCommand is all demo_sandbox ever runs.
const demoCommand = `echo "hello from your sandbox"; echo "directory: $(pwd)"; date -u; echo "visit $(date +%s)" >> visits.txt; echo "visits so far: $(wc -l < visits.txt)"`

// Run runs the demo command.
func (SandboxTool) Run(ctx context.Context, _ json.RawMessage, env agent.Env) (string, error) {
	sb, err := env.Sandbox(ctx)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Command: demoCommand, Timeout: 10 * time.Second, Output: io.MultiWriter(&out, env.Output())})
	if err != nil {
		return out.String(), err
	}
	if res.ExitCode != 0 {
		return out.String(), fmt.Errorf("the demo command exited with code %d", res.ExitCode)
	}
	return out.String(), nil
}
