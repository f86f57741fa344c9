package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

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

// Registry is the set of tools an agent offers, in a fixed order.
type Registry struct {
	tools map[string]Tool
	specs []ToolSpec
}

// NewRegistry checks the tools' specs and returns them as a registry.
func NewRegistry(tools ...Tool) (*Registry, error) {
	r := &Registry{tools: make(map[string]Tool)}
	for _, t := range tools {
		s := t.Spec()
		if !chat.ValidToolName(s.Name) {
			return nil, fmt.Errorf("tool name %q: use 1 to 64 letters, digits, _ or -", s.Name)
		}
		if _, dup := r.tools[s.Name]; dup {
			return nil, fmt.Errorf("tool %q is registered twice", s.Name)
		}
		if len(s.InputSchema) == 0 {
			s.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		if !json.Valid(s.InputSchema) {
			return nil, fmt.Errorf("tool %q: input schema is not JSON", s.Name)
		}
		r.tools[s.Name] = t
		r.specs = append(r.specs, s)
	}
	return r, nil
}

// Specs returns the tools' specs in registration order.
func (r *Registry) Specs() []ToolSpec { return r.specs }

// Lookup finds a tool by name.
func (r *Registry) Lookup(name string) (Tool, ToolSpec, bool) {
	t, ok := r.tools[name]
	if !ok {
		return nil, ToolSpec{}, false
	}
	for _, s := range r.specs {
		if s.Name == name {
			return t, s, true
		}
	}
	return nil, ToolSpec{}, false
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
