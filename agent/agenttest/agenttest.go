// Package agenttest helps test model providers against a local HTTP server that speaks a
// vendor's streaming wire format, and the agent loop without an actor: Server plays
// scripted HTTP answers (server-sent events, error statuses, connections cut off) and
// records the requests; Recorder is a conversation.Emitter that keeps what it is given.
package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chatd/chatd/conversation"
)

// Answer writes one HTTP answer.
type Answer func(w http.ResponseWriter, r *http.Request)

// Event is one server-sent event; an empty Name sends data only.
type Event struct {
	Name string
	Data string
}

// Data returns data-only events, one per payload.
func Data(payloads ...string) []Event {
	evs := make([]Event, len(payloads))
	for i, p := range payloads {
		evs[i] = Event{Data: p}
	}
	return evs
}

// SSE answers 200 with the events, each flushed on its own.
func SSE(events ...Event) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events)
	}
}

// Gated sends first, then waits for gate to close (or the client to go away) before
// it sends rest: an answer held mid-stream while a test does something.
func Gated(gate <-chan struct{}, first, rest []Event) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, first)
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		writeMore(w, rest)
	}
}

// Paced sends the headers, then each event when next receives (or stops when the
// client goes away): an answer a test streams one event at a time.
func Paced(next <-chan struct{}, events ...Event) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, nil)
		for _, ev := range events {
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
			writeMore(w, []Event{ev})
		}
	}
}

// Cut sends the events, then drops the connection without ending the response, as a
// proxy or a crashed server does.
func Cut(events ...Event) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w, events)
		panic(http.ErrAbortHandler)
	}
}

// Status answers with a status, headers as key/value pairs, and a JSON body.
func Status(code int, body string, header ...string) Answer {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func writeEvents(w http.ResponseWriter, events []Event) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if f, ok := w.(http.Flusher); ok {
		f.Flush() // the headers go out even before the first event
	}
	writeMore(w, events)
}

func writeMore(w http.ResponseWriter, events []Event) {
	f, _ := w.(http.Flusher)
	for _, ev := range events {
		var b strings.Builder
		if ev.Name != "" {
			fmt.Fprintf(&b, "event: %s\n", ev.Name)
		}
		for _, line := range strings.Split(ev.Data, "\n") {
			fmt.Fprintf(&b, "data: %s\n", line)
		}
		b.WriteString("\n")
		if _, err := io.WriteString(w, b.String()); err != nil {
			return
		}
		if f != nil {
			f.Flush()
		}
	}
}

// Request is one request the server received.
type Request struct {
	Method, Path string
	Header       http.Header
	Body         json.RawMessage
}

// Server is a local model provider playing Answers in order, one per request; a request
// beyond the script gets a 500 and fails the test.
type Server struct {
	*httptest.Server
	t        testing.TB
	mu       sync.Mutex
	answers  []Answer
	requests []Request
	arrived  chan int
}

// NewServer starts a server; it is closed when the test ends.
func NewServer(t testing.TB, answers ...Answer) *Server {
	s := &Server{t: t, answers: answers, arrived: make(chan int, 64)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Add appends answers to the script.
func (s *Server) Add(answers ...Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = append(s.answers, answers...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	if !json.Valid(body) {
		body, _ = json.Marshal(string(body))
	}
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	n := len(s.requests)
	var a Answer
	if len(s.answers) > 0 {
		a, s.answers = s.answers[0], s.answers[1:]
	}
	s.mu.Unlock()
	select {
	case s.arrived <- n:
	default:
	}
	if a == nil {
		s.t.Errorf("agenttest: request %d (%s %s) is beyond the script", n, r.Method, r.URL.Path)
		http.Error(w, `{"error":{"message":"no answer scripted"}}`, http.StatusInternalServerError)
		return
	}
	a(w, r)
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Arrived receives the count of requests each time one arrives (best effort: at most 64
// pending notifications).
func (s *Server) Arrived() <-chan int { return s.arrived }

// Body decodes request i's JSON body into a generic value, for assertions.
func (s *Server) Body(i int) map[string]any {
	s.t.Helper()
	reqs := s.Requests()
	if i >= len(reqs) {
		s.t.Fatalf("agenttest: no request %d (have %d)", i, len(reqs))
	}
	var m map[string]any
	if err := json.Unmarshal(reqs[i].Body, &m); err != nil {
		s.t.Fatalf("agenttest: request %d body: %v", i, err)
	}
	return m
}

// Recorder is a conversation.Emitter that keeps a log of what an agent emits, one line
// per call ("text: Hello", "reasoning.end: {…}", "tool.start: id name {…}", "tool.end:
// id ok|error|interrupted output", "tool.await: id", "usage: in out ctx window", …).
// Approvals are decided by Decide, approve all when nil; or held back, with Hold.
type Recorder struct {
	Decide func(conversation.ToolCall) conversation.Decision
	// Hold, when set, holds decisions back: AwaitApproval and AwaitDecision send the
	// call's id on Hold (so make it buffered, or receive promptly) and the decision
	// comes when the test calls Give.
	Hold chan string

	mu   sync.Mutex
	log  []string
	held map[string]chan conversation.Decision
}

// Give decides a call whose decision Hold held back.
func (r *Recorder) Give(id string, d conversation.Decision) {
	r.mu.Lock()
	ch := r.held[id]
	delete(r.held, id)
	r.mu.Unlock()
	if ch == nil {
		panic("agenttest: no decision is held for " + id)
	}
	ch <- d
}

// decision is the channel an approval's decision comes on.
func (r *Recorder) decision(c conversation.ToolCall) <-chan conversation.Decision {
	ch := make(chan conversation.Decision, 1)
	if r.Hold != nil {
		r.mu.Lock()
		if r.held == nil {
			r.held = map[string]chan conversation.Decision{}
		}
		r.held[c.ID] = ch
		r.mu.Unlock()
		r.Hold <- c.ID
		return ch
	}
	d := conversation.Decision{Approved: true}
	if r.Decide != nil {
		d = r.Decide(c)
	}
	ch <- d
	return ch
}

var _ conversation.Emitter = (*Recorder)(nil)

func (r *Recorder) add(format string, args ...any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log = append(r.log, fmt.Sprintf(format, args...))
	return nil
}

// Log returns the lines so far.
func (r *Recorder) Log() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// Reply returns the concatenated text deltas.
func (r *Recorder) Reply() string {
	var b strings.Builder
	for _, l := range r.Log() {
		if t, ok := strings.CutPrefix(l, "text: "); ok {
			b.WriteString(t)
		}
	}
	return b.String()
}

func (r *Recorder) Text(delta string) error      { return r.add("text: %s", delta) }
func (r *Recorder) Reasoning(delta string) error { return r.add("reasoning: %s", delta) }
func (r *Recorder) EndReasoning(d json.RawMessage) error {
	return r.add("reasoning.end: %s", d)
}
func (r *Recorder) ToolStart(c conversation.ToolCall) error {
	return r.add("tool.start: %s %s %s", c.ID, c.Name, c.Input)
}
func (r *Recorder) ToolOutput(id, text string) error { return r.add("tool.output: %s %s", id, text) }
func (r *Recorder) ToolEnd(id string, res conversation.ToolResult) error {
	if res.Interrupted {
		return r.add("tool.end: %s interrupted %s", id, res.Output)
	}
	if res.Err != nil {
		return r.add("tool.end: %s error %s", id, res.Err)
	}
	return r.add("tool.end: %s ok %s", id, res.Output)
}
func (r *Recorder) AwaitApproval(c conversation.ToolCall) (<-chan conversation.Decision, error) {
	_ = r.add("tool.approval: %s %s %s", c.ID, c.Name, c.Input)
	return r.decision(c), nil
}

// AwaitDecision records the wait and decides like AwaitApproval (Decide sees a call
// with only its id).
func (r *Recorder) AwaitDecision(id string) (<-chan conversation.Decision, error) {
	_ = r.add("tool.await: %s", id)
	return r.decision(conversation.ToolCall{ID: id}), nil
}

// Expire records the expiry and, for a held call, gives it the expiry's denial.
func (r *Recorder) Expire(id string) error {
	_ = r.add("expire: %s", id)
	r.mu.Lock()
	ch := r.held[id]
	delete(r.held, id)
	r.mu.Unlock()
	if ch != nil {
		ch <- conversation.Decision{Output: conversation.ExpiredOutput}
	}
	return nil
}
func (r *Recorder) Paused() error            { return r.add("paused") }
func (r *Recorder) Resumed() error           { return r.add("resumed") }
func (r *Recorder) Notice(text string) error { return r.add("notice: %s", text) }
func (r *Recorder) Progress(step, of int, label string) error {
	return r.add("progress: %d/%d %s", step, of, label)
}
func (r *Recorder) State(state json.RawMessage) error { return r.add("state: %s", state) }
func (r *Recorder) Usage(u conversation.Usage) error {
	return r.add("usage: %d %d %d %d", u.InputTokens, u.OutputTokens, u.ContextTokens, u.ContextWindow)
}
