package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chatd/chatd/chat"
)

// Role says who a model message is from.
type Role string

// Model message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation a model is given.
type Message struct {
	Role Role
	// Text is the user's or the assistant's text.
	Text string
	// Reasoning is the assistant's reasoning, kept for providers that want it back.
	Reasoning []Reasoning
	// ToolCalls are the calls an assistant message made, in order.
	ToolCalls []ToolCall
	// A tool message answers one call.
	ToolCallID string
	ToolName   string
	Result     string
	IsError    bool
}

// Reasoning is a block of a model's reasoning ("thinking"), with the provider's signature
// when it has one, or a redacted block's opaque data.
type Reasoning struct {
	Text      string
	Signature string
	Redacted  string
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	ID    string
	Name  string
	Input json.RawMessage
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	System   string
	Messages []Message
	Tools    []ToolSpec
	// Continue is set when the model is to continue an answer that was cut off rather
	// than answer anew: a run continued from its checkpoint whose last assistant text
	// did not complete. It is the answer's text so far, and the Text of the last of
	// Messages, an assistant message without tool calls. The events carry only what
	// follows it: the rest of the text, then whatever the model does next (reasoning,
	// tool calls). A provider that cannot continue text answers the Messages as they
	// are (see ContinueInstruction).
	Continue string
}

// ContinueInstruction is the user message that follows the cut-off answer when a
// provider cannot have the model continue its own message (OpenAI-compatible servers,
// Anthropic with extended thinking): the model then writes a new message that is meant
// to be the rest of the old one.
const ContinueInstruction = "Your previous message was cut off. Continue it exactly where it stopped, " +
	"without repeating anything it already says; if it stopped in the middle of a word, finish that word."

// SkipRepeatedSpace wraps emit for the answer to a request with Continue (cont) whose
// prompt ends without cont's trailing white space: Anthropic refuses a prefill that ends
// in white space, chat templates strip it, and a model told to continue often opens
// with a space of its own. The user already has that space, in the stored text that was
// cut off; so the white space the answer opens with is dropped as far as it repeats
// cont's, across deltas. The rest passes as it comes: text that opens otherwise (the
// model went on without a space, or with a line break where a space was) is the
// model's and is kept, and nothing of cont is lost, since cont is never re-emitted.
func SkipRepeatedSpace(cont string, emit func(ModelEvent) error) func(ModelEvent) error {
	pending := cont[len(strings.TrimRightFunc(cont, unicode.IsSpace)):]
	if pending == "" {
		return emit
	}
	return func(ev ModelEvent) error {
		if ev.Kind != EventText || pending == "" {
			return emit(ev)
		}
		text := ev.Text
		for pending != "" && text != "" {
			p, np := utf8.DecodeRuneInString(pending)
			t, nt := utf8.DecodeRuneInString(text)
			if p != t {
				pending = ""
				break
			}
			pending, text = pending[np:], text[nt:]
		}
		if text == "" {
			return nil // all of it repeated the space; the next delta may repeat more
		}
		pending = ""
		ev.Text = text
		return emit(ev)
	}
}

// EventKind says what a ModelEvent carries.
type EventKind int

// Model event kinds.
const (
	EventText         EventKind = iota + 1 // Text: a piece of the answer
	EventReasoning                         // Reasoning.Text: a piece of the current reasoning block
	EventReasoningEnd                      // Reasoning.Signature or .Redacted: the block is complete
	EventToolCall                          // ToolCall: a complete tool call
	EventUsage                             // Usage: tokens of this call
	// EventKeepAlive carries nothing: the provider received data that makes no other
	// event (yet), such as a tool call's argument fragments or a ping. It tells the loop
	// the call is alive (see Config.ModelIdleTimeout) and is otherwise ignored: it is
	// not output, and does not count as streamed for retries. emit must not fail it:
	// providers may ignore what it returns for one.
	EventKeepAlive
	// EventProgress: Progress, how far a long answer is (see conversation.Emitter's
	// Progress). It is not output, and does not count as streamed for retries; a report
	// the emitter refuses is logged and ignored.
	EventProgress
)

// ModelEvent is one piece of a streamed model response.
type ModelEvent struct {
	Kind      EventKind
	Text      string
	Reasoning Reasoning
	ToolCall  ToolCall
	Usage     Usage
	Progress  Progress
}

// Progress is how far a run is: Step of Of, with an optional Label.
type Progress = chat.Progress

// Usage counts the tokens of one model call. InputTokens is the whole prompt, cached
// parts included: the conversation's size as the model saw it.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
}

// Model is an LLM provider. Stream sends the request and calls emit with each event of
// the response, in order, returning when the response is complete. When emit returns an
// error Stream stops and returns it. Errors should be *ModelError, so the loop knows
// whether a retry may help. A provider whose responses can carry data that makes no
// event for a while emits EventKeepAlive as it arrives (KeepAliveMiddleware does so for
// an HTTP SDK), so the loop does not take a busy call for a silent one.
type Model interface {
	Stream(ctx context.Context, req ModelRequest, emit func(ModelEvent) error) error
}

// KeepAliveMiddleware is HTTP middleware of the shape the OpenAI and Anthropic SDKs'
// option.WithMiddleware take. It calls alive when a response's headers arrive and on
// every read of its body that returns data, so whatever is received counts as activity,
// including what the SDK consumes itself (pings, SSE comments) or holds back (a tool
// call's input). alive runs on the goroutine that reads the body: the SDK's caller.
func KeepAliveMiddleware(alive func()) func(*http.Request, func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	return func(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
		resp, err := next(req)
		if err == nil && resp != nil && resp.Body != nil {
			alive()
			resp.Body = &keepAliveBody{ReadCloser: resp.Body, alive: alive}
		}
		return resp, err
	}
}

type keepAliveBody struct {
	io.ReadCloser
	alive func()
}

func (b *keepAliveBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.alive()
	}
	return n, err
}

// ModelError is a failed model call, classified.
type ModelError struct {
	// Code is shown to the user with the run's error, e.g. "rate_limited".
	Code string
	// Message is shown to the user: no raw SDK text, no secrets.
	Message string
	// Transient errors (timeouts, 5xx, 429, a connection reset, overload) may succeed
	// on a retry; others (4xx, content policy) will not.
	Transient bool
	// RetryAfter is the provider's hint for the earliest retry, 0 for none.
	RetryAfter time.Duration
	// Err is the underlying error, for logs.
	Err error
}

func (e *ModelError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return e.Code + ": " + e.Message
}

func (e *ModelError) Unwrap() error { return e.Err }
