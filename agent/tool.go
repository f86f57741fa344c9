package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
)

// ToolSpec describes a tool to the model and to the loop.
type ToolSpec struct {
	// Name is how the model calls it: letters, digits, _ and -, at most 64.
	Name        string
	Description string
	// InputSchema is the JSON schema of the tool's input object.
	InputSchema json.RawMessage
	// NeedsApproval makes every call wait for a person's decision before it runs.
	NeedsApproval bool
	// Idempotent declares that running a call twice does what running it once does
	// (reading the time, a lookup). A call that was running when its process died is
	// then run again, on the same call id, when its run is continued; any other such
	// call is ended as interrupted, its effects unknown, and the model is told so.
	Idempotent bool
	// StaleAfter overrides the loop's Config.ToolStale for this tool: a call that sends
	// no output and reports no progress for this long is stopped as stale. Negative:
	// never; 0: the loop's.
	StaleAfter time.Duration
}

// Tool is something the model can call.
type Tool interface {
	Spec() ToolSpec
	// Run executes one call and returns its result for the model and the user. An
	// error is a failed call: the model sees it and may try again; it never ends the
	// run. Long output may be streamed to env.Output() as well. Run must return soon
	// after ctx ends: the run cannot end before its tools do.
	Run(ctx context.Context, input json.RawMessage, env Env) (string, error)
}

// Env is what a tool call can use besides its input.
type Env interface {
	// Output streams output to the user as tool.output, up to the output cap.
	Output() io.Writer
	// Progress reports how far the call, and so its run, is: step of of, with an
	// optional label ("3 of 7 pages"). Every tab sees it at once and it is kept on the
	// run (see conversation.Emitter's Progress for the limits); a bad value is refused
	// with an error and changes nothing. It may be called from any goroutine of the
	// call.
	Progress(step, of int, label string) error
	// Sandbox returns the session's sandbox, resuming it, or creating one when the
	// session has none (or its old one was killed).
	Sandbox(ctx context.Context) (sandbox.Sandbox, error)
}

// Registry is the set of tools an agent offers, in a fixed order: the tools it was made
// with, then groups that come and go while it runs (an MCP server's tools, listed when
// the server is reachable and again when it says they changed). A run offers the tools
// there are when it starts; a call looks its tool up when it runs. Safe for concurrent
// use.
type Registry struct {
	mu     sync.RWMutex
	fixed  []entry
	groups map[string][]entry
	order  []string // group names, in the order they were first set
}

type entry struct {
	tool Tool
	spec ToolSpec
}

// NewRegistry checks the tools' specs and returns them as a registry.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{groups: map[string][]entry{}}
	es, err := r.check(tools, "")
	if err != nil {
		return nil, err
	}
	r.fixed = es
	return r, nil
}

// check validates tools as group's (the fixed tools: ""): valid names, unique among
// themselves and among the registry's other tools, JSON input schemas. r.mu is held, or
// r is new.
func (r *Registry) check(tools []Tool, group string) ([]entry, error) {
	taken := map[string]string{} // name → group
	for _, e := range r.fixed {
		taken[e.spec.Name] = ""
	}
	for g, es := range r.groups {
		if g == group {
			continue
		}
		for _, e := range es {
			taken[e.spec.Name] = g
		}
	}
	var out []entry
	seen := map[string]bool{}
	for _, t := range tools {
		s := t.Spec()
		if !chat.ValidToolName(s.Name) {
			return nil, fmt.Errorf("tool name %q: use 1 to 64 letters, digits, _ or -", s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("tool %q is registered twice", s.Name)
		}
		if g, dup := taken[s.Name]; dup {
			if g == "" {
				return nil, fmt.Errorf("tool %q is registered twice", s.Name)
			}
			return nil, fmt.Errorf("tool %q is registered twice (also by %s)", s.Name, g)
		}
		seen[s.Name] = true
		if len(s.InputSchema) == 0 {
			s.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		if !json.Valid(s.InputSchema) {
			return nil, fmt.Errorf("tool %q: input schema is not JSON", s.Name)
		}
		out = append(out, entry{tool: t, spec: s})
	}
	return out, nil
}

// SetGroup replaces group's tools (none: the group has no tools now). Runs started
// before keep offering what they started with; their calls of a tool gone are failed
// calls ("there is no tool named …"). An error (a bad spec, a name another group or a
// fixed tool has) changes nothing.
func (r *Registry) SetGroup(group string, tools ...Tool) error {
	if group == "" {
		return errors.New("a tool group needs a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	es, err := r.check(tools, group)
	if err != nil {
		return err
	}
	if _, ok := r.groups[group]; !ok {
		r.order = append(r.order, group)
	}
	r.groups[group] = es
	return nil
}

// Specs returns the tools' specs: the fixed tools in registration order, then each
// group's, groups in the order they were first set.
func (r *Registry) Specs() []ToolSpec {
	r.mu.RLock()
	defer r.mu.RUnlock()
	specs := make([]ToolSpec, 0, len(r.fixed))
	for _, e := range r.fixed {
		specs = append(specs, e.spec)
	}
	for _, g := range r.order {
		for _, e := range r.groups[g] {
			specs = append(specs, e.spec)
		}
	}
	return specs
}

// Lookup finds a tool by name.
func (r *Registry) Lookup(name string) (Tool, ToolSpec, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, e := range r.fixed {
		if e.spec.Name == name {
			return e.tool, e.spec, true
		}
	}
	for _, g := range r.order {
		for _, e := range r.groups[g] {
			if e.spec.Name == name {
				return e.tool, e.spec, true
			}
		}
	}
	return nil, ToolSpec{}, false
}

// NeedsApproval reports whether the tool named name waits for a person (false for a
// tool the registry does not have now).
func (r *Registry) NeedsApproval(name string) bool {
	_, spec, ok := r.Lookup(name)
	return ok && spec.NeedsApproval
}

// CallInfo is what a tool call is, for a tool that passes it on (an MCP server gets
// the call id as its idempotency key, and the user's id): CallInfoFrom(ctx) in Run.
type CallInfo struct {
	// CallID is the call's id: the same when a call is run again after a crash.
	CallID string
	// Tool is the name the model called.
	Tool      string
	SessionID uuid.UUID
	RunID     uuid.UUID
	// Owner is the user the session belongs to.
	Owner string
	// Token is the bearer token the run's message was sent with, when this process has
	// it (conversation.Request.Token): pass it on only where the operator said so.
	Token string
}

type callInfoKey struct{}

// WithCallInfo returns ctx carrying info (the loop sets it for each call).
func WithCallInfo(ctx context.Context, info CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, info)
}

// CallInfoFrom returns the call a tool's Run is running, if ctx carries one.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	info, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return info, ok
}

// errToolPanicked is what the model sees when a tool panics.
var errToolPanicked = errors.New("the tool crashed")

// capText cuts s to about limit bytes on character boundaries: the head, a marker with
// how much was cut, and the tail, where the end of a command's output (an exit code, the
// last error) usually is.
func capText(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	tailLen := min(2048, limit/4)
	head, _ := cutText(s, limit-tailLen)
	tail := s[len(s)-tailLen:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return head + fmt.Sprintf("\n… [output truncated: %d bytes not shown] …\n", len(s)-len(head)-len(tail)) + tail
}

// cutText returns the head of s of at most limit bytes ending on a character boundary,
// and how many bytes it left out.
func cutText(s string, limit int) (string, int) {
	if len(s) <= limit {
		return s, 0
	}
	cut := max(limit, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], len(s) - cut
}

// outputWriter streams a tool's output to the user: whole characters only (a write may
// end inside one), and nothing past the cap. It keeps what it sent, so a tool that only
// streams still gives the model its output.
type outputWriter struct {
	emit    func(string) error
	limit   int
	written int
	pending []byte // an incomplete UTF-8 sequence at the end of the last write
	capped  bool
	sent    strings.Builder
}

func (w *outputWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.capped {
		return n, nil
	}
	buf := append(w.pending, p...)
	// Keep an incomplete trailing character for the next write.
	end := len(buf)
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				end = i
			}
			break
		}
	}
	w.pending = append([]byte(nil), buf[end:]...)
	chunk := string(buf[:end])
	if w.written+len(chunk) > w.limit {
		// How much more will come is unknown here, so the marker gives no count.
		chunk, _ = cutText(chunk, w.limit-w.written)
		chunk += "\n… [output truncated]"
		w.capped = true
	}
	w.written += len(chunk)
	if chunk == "" {
		return n, nil
	}
	w.sent.WriteString(chunk)
	if err := w.emit(chunk); err != nil {
		return 0, err
	}
	return n, nil
}
