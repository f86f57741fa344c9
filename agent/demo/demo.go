// Package demo is chatd's embedded default agent. It needs no model and no network: it
// streams a deterministic reply word by word at a set pace, so a newcomer can watch a run
// stream, disconnect, reconnect and catch up. When the user's message contains the word
// "tool" it calls a built-in demo tool between two text segments, so segment boundaries
// and tool messages are visible too.
package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/jonboulle/clockwork"

	"github.com/chatd/chatd/conversation"
)

// Defaults used by cmd/chatd (CHATD_DEMO_WORDS, CHATD_DEMO_DELAY).
const (
	DefaultWords = 60
	DefaultDelay = 30 * time.Millisecond
)

// ToolName is the demo tool the agent calls when a message says "tool".
const ToolName = "demo_lookup"

// Config sets the demo's length and pace.
type Config struct {
	// Words is the length of a reply in words (at least 1).
	Words int
	// Delay is the pause before each word; 0 streams as fast as possible.
	Delay time.Duration
	// Clock paces the words. Defaults to the real clock.
	Clock clockwork.Clock
}

// Agent is the demo agent.
type Agent struct {
	cfg Config
}

var _ conversation.Agent = (*Agent)(nil)

// New returns a demo agent.
func New(cfg Config) *Agent {
	if cfg.Words < 1 {
		cfg.Words = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	return &Agent{cfg: cfg}
}

// filler is what the demo says after its opening; it cycles for long replies.
var filler = strings.Fields(`chatd keeps this run going on the server whether or not
any tab is watching. Close the tab, lose the network or refresh the page, then say hello
again with the epoch and lastSeq you last saw: you are caught up to the exact word and
follow the live stream from there. Every reply is stored in segments, never token by
token, so the database stays quiet while the words flow.`)

// Reply returns the words the demo streams for a message, in order.
func Reply(content string, n int) []string {
	words := strings.Fields(fmt.Sprintf("Demo reply to %q.", quote(content)))
	for i := 0; len(words) < n; i++ {
		words = append(words, filler[i%len(filler)])
	}
	return words[:n]
}

// quote shortens a message to its first few words.
func quote(content string) string {
	f := strings.Fields(content)
	if len(f) > 6 {
		return strings.Join(f[:6], " ") + "…"
	}
	return strings.Join(f, " ")
}

// MentionsTool reports whether a message asks for the demo tool: it contains the word
// "tool", in any case.
func MentionsTool(content string) bool {
	for _, w := range strings.FieldsFunc(content, func(r rune) bool { return !unicode.IsLetter(r) }) {
		if strings.EqualFold(w, "tool") {
			return true
		}
	}
	return false
}

// Run streams the reply. With a tool call, the first half of the words comes before the
// call and the rest after it.
func (a *Agent) Run(ctx context.Context, req conversation.Request, out conversation.Emitter) error {
	words := Reply(req.Content, a.cfg.Words)
	split := len(words)
	if MentionsTool(req.Content) {
		split = len(words) / 2
	}
	if err := a.stream(ctx, out, words[:split], split > 0); err != nil {
		return err
	}
	if split == len(words) {
		return nil
	}
	if err := a.lookup(ctx, out, req.Content); err != nil {
		return err
	}
	return a.stream(ctx, out, words[split:], false)
}

func (a *Agent) stream(ctx context.Context, out conversation.Emitter, words []string, first bool) error {
	for i, w := range words {
		if err := a.pause(ctx); err != nil {
			return err
		}
		if i > 0 || !first {
			w = " " + w
		}
		if err := out.Text(w); err != nil {
			return err
		}
	}
	return nil
}

// lookup is the demo tool: it "searches" for the message's first words, streaming three
// lines of progress, and returns a made-up but deterministic result.
func (a *Agent) lookup(ctx context.Context, out conversation.Emitter, content string) error {
	const id = "demo-call-1"
	input, _ := json.Marshal(map[string]string{"query": quote(content)})
	if err := out.ToolStart(conversation.ToolCall{ID: id, Name: ToolName, Input: input}); err != nil {
		return err
	}
	for _, line := range []string{"connecting to the demo index\n", "searching\n", "found 3 matches\n"} {
		if err := a.pause(ctx); err != nil {
			return err
		}
		if err := out.ToolOutput(id, line); err != nil {
			return err
		}
	}
	result := fmt.Sprintf("3 demo results for %q", quote(content))
	return out.ToolEnd(id, conversation.ToolResult{Output: result})
}

func (a *Agent) pause(ctx context.Context) error {
	if a.cfg.Delay <= 0 {
		return ctx.Err()
	}
	select {
	case <-a.cfg.Clock.After(a.cfg.Delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
