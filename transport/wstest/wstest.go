// Package wstest is a protocol-v1 client for tests: it dials chatd over a real WebSocket,
// sends frames, and keeps the conversation state a careful client would, applying a
// snapshot and then every event while checking that seqs are consecutive. Two clients, or
// a client and the database, can then be compared with Equal.
package wstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
)

// ReadTimeout bounds every read a test makes; a test that waits longer has hung.
var ReadTimeout = 15 * time.Second

// ErrorInfo is an error object on the wire.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Tool is the tool part of a message on the wire.
type Tool struct {
	CallID    string          `json:"callId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	InputHash string          `json:"inputHash,omitempty"`
	Output    *string         `json:"output,omitempty"`
	Status    string          `json:"status"`
	Decision  *Decision       `json:"decision,omitempty"`
}

// Decision is how a tool call's approval was decided.
type Decision struct {
	Approved bool      `json:"approved"`
	By       string    `json:"by,omitempty"`
	At       time.Time `json:"at"`
	Via      string    `json:"via,omitempty"`
	RuleID   string    `json:"ruleId,omitempty"`
}

// ApprovalRule is one of a session's standing approvals.
type ApprovalRule struct {
	RuleID     string    `json:"ruleId"`
	Tool       string    `json:"tool"`
	Command    *string   `json:"command,omitempty"`
	CreatedBy  string    `json:"createdBy"`
	CreatedVia string    `json:"createdVia"`
	ToolCallID string    `json:"toolCallId"`
	CreatedAt  time.Time `json:"createdAt"`
}

// Message is a message on the wire.
type Message struct {
	ID        string     `json:"id"`
	Position  int64      `json:"position"`
	Role      string     `json:"role"`
	Kind      string     `json:"kind,omitempty"`
	Content   string     `json:"content"`
	Status    string     `json:"status"`
	RunID     string     `json:"runId,omitempty"`
	RequestID string     `json:"requestId,omitempty"`
	CreatedAt time.Time  `json:"createdAt"`
	Error     *ErrorInfo `json:"error,omitempty"`
	Tool      *Tool      `json:"tool,omitempty"`
	ParentID  string     `json:"parentId,omitempty"`
	Branch    *Branch    `json:"branch,omitempty"`
}

// Branch is where a message stands among its parent's children.
type Branch struct {
	Siblings []string `json:"siblings"`
	Index    int      `json:"index"`
}

// PendingApproval is the call a run waits on.
type PendingApproval struct {
	ToolCallID string          `json:"toolCallId"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input"`
	InputHash  string          `json:"inputHash"`
}

// Run is a run on the wire.
type Run struct {
	RunID           string           `json:"runId"`
	RequestID       string           `json:"requestId"`
	Status          string           `json:"status"`
	StartedAt       time.Time        `json:"startedAt"`
	EndedAt         *time.Time       `json:"endedAt,omitempty"`
	LastActivityAt  time.Time        `json:"lastActivityAt"`
	Error           *ErrorInfo       `json:"error,omitempty"`
	PendingApproval *PendingApproval `json:"pendingApproval,omitempty"`
	CancelReason    string           `json:"cancelReason,omitempty"`
	Model           string           `json:"model,omitempty"`
	Resumable       bool             `json:"resumable,omitempty"`
	Recoveries      int              `json:"recoveries,omitempty"`
	RetryOf         string           `json:"retryOf,omitempty"`
	Usage           *struct {
		InputTokens   int64 `json:"inputTokens"`
		OutputTokens  int64 `json:"outputTokens"`
		ContextTokens int64 `json:"contextTokens"`
		ContextWindow int64 `json:"contextWindow"`
	} `json:"usage,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is a run's progress on the wire.
type Progress struct {
	Step  int    `json:"step"`
	Of    int    `json:"of"`
	Label string `json:"label,omitempty"`
}

// Frame is any server frame. Body is set for error replies (their "message" is text,
// where events carry a message object in MessageObj).
type Frame struct {
	Type        string    `json:"type"`
	Seq         int64     `json:"seq"`
	RunID       string    `json:"runId"`
	RequestID   string    `json:"requestId"`
	SessionID   string    `json:"sessionId"`
	Epoch       string    `json:"epoch"`
	LastSeq     int64     `json:"lastSeq"`
	Messages    []Message `json:"messages"`
	HasMore     bool      `json:"hasMore"`
	LeafID      string    `json:"leafId"` // branch.selected
	ActiveRun   *Run      `json:"activeRun"`
	LastRun     *Run      `json:"lastRun"`
	Run         *Run      `json:"run"`
	UserMessage *Message  `json:"userMessage"`
	MessageID   string    `json:"messageId"`
	Text        *string   `json:"text"`
	Status      string    `json:"status"`
	Duplicate   bool      `json:"duplicate"`
	Code        string    `json:"code"`
	ExpiresAt   string    `json:"expiresAt"`
	// ApprovalRules are a snapshot's, Rules an approval.rules event's.
	ApprovalRules []ApprovalRule `json:"approvalRules"`
	Rules         []ApprovalRule `json:"rules"`
	// Queued are a snapshot's or a queue.updated event's queued messages.
	Queued []Queued `json:"queued"`

	RawMessage json.RawMessage `json:"message"`
	RawError   json.RawMessage `json:"error"`
	// Message is the message object of segment and tool events.
	Message *Message `json:"-"`
	// ErrorText is the text of an error reply.
	ErrorText string `json:"-"`
	// Error is the error object of an assistant.segment.ended event.
	Error *ErrorInfo `json:"-"`
	// Raw is the frame as received.
	Raw []byte `json:"-"`
}

// Sequenced reports whether the frame is a sequenced event.
func (f Frame) Sequenced() bool { return f.Seq > 0 }

// Terminal reports whether the frame ends a run.
func (f Frame) Terminal() bool {
	return f.Type == "chat.done" || f.Type == "chat.error" || f.Type == "chat.cancelled"
}

// Decode parses a server frame.
func Decode(b []byte) (Frame, error) {
	var f Frame
	if err := json.Unmarshal(b, &f); err != nil {
		return Frame{}, fmt.Errorf("decode %s: %w", b, err)
	}
	f.Raw = b
	if len(f.RawMessage) > 0 && f.RawMessage[0] == '{' {
		f.Message = new(Message)
		if err := json.Unmarshal(f.RawMessage, f.Message); err != nil {
			return Frame{}, fmt.Errorf("decode message of %s: %w", b, err)
		}
	} else if len(f.RawMessage) > 0 {
		if err := json.Unmarshal(f.RawMessage, &f.ErrorText); err != nil {
			return Frame{}, fmt.Errorf("decode error text of %s: %w", b, err)
		}
	}
	if len(f.RawError) > 0 && f.RawError[0] == '{' {
		f.Error = new(ErrorInfo)
		if err := json.Unmarshal(f.RawError, f.Error); err != nil {
			return Frame{}, err
		}
	}
	return f, nil
}

// State is a conversation as a client holds it.
type State struct {
	SessionID string
	Epoch     string
	LastSeq   int64
	Messages  map[string]*Message // the active path's
	// OffPath holds the ids of messages added on a branch the state does not show:
	// events about them are ignored, as a tab ignores them. Branched: the session has
	// branches, so an event may name a message of another branch never seen.
	OffPath   map[string]bool
	Branched  bool
	ActiveRun *Run
	// LastRun is the session's latest run when the snapshot found it ended.
	LastRun *Run
	// Ended holds the final run object of every run that ended while watched.
	Ended map[string]*Run
	// ApprovalRules are the session's standing approvals.
	ApprovalRules []ApprovalRule
	// Queued are the messages waiting behind the active run (whileRunning queue).
	Queued []Queued
}

// Queued is a queued message on the wire.
type Queued struct {
	RequestID string `json:"requestId"`
	Content   string `json:"content"`
	Status    string `json:"status"`
	CreatedAt string `json:"createdAt"`
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Messages: map[string]*Message{}, OffPath: map[string]bool{}, Ended: map[string]*Run{}}
}

// Apply folds a frame into the state. Replies are ignored. It returns an error when the
// frame breaks the protocol's guarantees: a seq that is not the next one, an event about
// a message the state does not hold, a resumed frame for another position.
func (s *State) Apply(f Frame) error {
	switch f.Type {
	case "snapshot":
		s.SessionID, s.Epoch, s.LastSeq = f.SessionID, f.Epoch, f.LastSeq
		s.Messages = map[string]*Message{}
		for i := range f.Messages {
			m := f.Messages[i]
			s.Messages[m.ID] = &m
			s.Branched = s.Branched || m.Branch != nil
		}
		s.ActiveRun = f.ActiveRun
		s.LastRun = f.LastRun
		s.ApprovalRules = f.ApprovalRules
		s.Queued = f.Queued
		return nil
	case "resumed":
		if f.Epoch != s.Epoch || f.LastSeq != s.LastSeq || f.SessionID != s.SessionID {
			return fmt.Errorf("resumed at %s/%d of %s, state is at %s/%d of %s", f.Epoch, f.LastSeq, f.SessionID, s.Epoch, s.LastSeq, s.SessionID)
		}
		return nil
	case "ack", "error", "history", "auth.refreshed", "auth.expiring":
		return nil
	}
	if f.Seq != s.LastSeq+1 {
		return fmt.Errorf("%s has seq %d, expected %d", f.Type, f.Seq, s.LastSeq+1)
	}
	s.LastSeq = f.Seq
	msg := func(id string) (*Message, error) {
		m, ok := s.Messages[id]
		if !ok && !s.OffPath[id] && !s.Branched {
			return nil, fmt.Errorf("%s (seq %d) names message %s that the state does not hold", f.Type, f.Seq, id)
		}
		return m, nil
	}
	// add applies the protocol's rule: a message under the last one held grows the path,
	// one held is replaced, any other is on a branch the state does not show.
	add := func(m Message) {
		if _, ok := s.Messages[m.ID]; ok {
			s.Messages[m.ID] = &m
			return
		}
		var last *Message
		for _, h := range s.Messages {
			if last == nil || h.Position > last.Position {
				last = h
			}
		}
		if (last == nil && m.ParentID == "") || (last != nil && m.ParentID == last.ID) {
			s.Messages[m.ID] = &m
			return
		}
		s.OffPath[m.ID] = true
		s.Branched = true
	}
	switch f.Type {
	case "chat.started":
		add(*f.UserMessage)
		s.ActiveRun = f.Run
		s.LastRun = nil
	case "assistant.segment.started", "tool.start", "message.added":
		add(*f.Message)
	case "tool.update", "tool.end":
		if m, err := msg(f.Message.ID); err != nil {
			return err
		} else if m != nil {
			c := *f.Message
			s.Messages[c.ID] = &c
		}
	case "branch.selected":
		s.Branched = true
		s.Messages = map[string]*Message{}
		for i := range f.Messages {
			m := f.Messages[i]
			s.Messages[m.ID] = &m
			delete(s.OffPath, m.ID)
		}
	case "chat.delta":
		m, err := msg(f.MessageID)
		if err != nil || m == nil {
			return err
		}
		m.Content += *f.Text
	case "tool.output":
		m, err := msg(f.MessageID)
		if err != nil || m == nil {
			return err
		}
		out := *f.Text
		if m.Tool.Output != nil {
			out = *m.Tool.Output + out
		}
		m.Tool.Output = &out
	case "assistant.segment.ended":
		m, err := msg(f.MessageID)
		if err != nil || m == nil {
			return err
		}
		m.Status = f.Status
		m.Error = f.Error
	case "run.status":
		if ended(f.Run.Status) {
			// A dismissed run: it stays ended.
			s.Ended[f.Run.RunID] = f.Run
			s.LastRun = f.Run
			if s.ActiveRun != nil && s.ActiveRun.RunID == f.Run.RunID {
				s.ActiveRun = nil
			}
			break
		}
		s.ActiveRun = f.Run
		s.LastRun = nil // a continued run is active again
	case "chat.done", "chat.error", "chat.cancelled":
		s.ActiveRun = nil
		s.LastRun = f.Run
		s.Ended[f.Run.RunID] = f.Run
	case "approval.rules":
		s.ApprovalRules = f.Rules
	case "queue.updated":
		s.Queued = f.Queued
	default:
		return fmt.Errorf("unknown event type %q", f.Type)
	}
	return nil
}

func ended(status string) bool {
	return status == "done" || status == "error" || status == "cancelled" || status == "interrupted"
}

// Sorted returns the messages in position order.
func (s *State) Sorted() []Message {
	out := make([]Message, 0, len(s.Messages))
	for _, m := range s.Messages {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Message) int { return int(a.Position - b.Position) })
	return out
}

// Diff describes how two message lists differ, or returns "" when they are equal. Tool
// inputs are compared as JSON values and times as instants.
func Diff(want, got []Message) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d messages, want %d:\n got %s\nwant %s", len(got), len(want), summary(got), summary(want))
	}
	for i := range want {
		w, g := normalize(want[i]), normalize(got[i])
		wb, _ := json.Marshal(w)
		gb, _ := json.Marshal(g)
		if string(wb) != string(gb) {
			return fmt.Sprintf("message %d differs:\n got %s\nwant %s", i, gb, wb)
		}
	}
	return ""
}

// Contents returns the content of each of ms, in order: a transcript at a glance.
func Contents(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Content
	}
	return out
}

func normalize(m Message) Message {
	m.CreatedAt = m.CreatedAt.UTC()
	if m.Tool != nil {
		t := *m.Tool
		var v any
		if json.Unmarshal(t.Input, &v) == nil {
			t.Input, _ = json.Marshal(v)
		}
		m.Tool = &t
	}
	return m
}

func summary(ms []Message) string {
	var b []byte
	for _, m := range ms {
		b = fmt.Appendf(b, "[%d %s %s %q] ", m.Position, m.Role, m.Status, trunc(m.Content))
	}
	return string(b)
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// FromStore converts stored messages to their wire form through the real encoder.
func FromStore(msgs []chat.Message) ([]Message, error) {
	b, err := ws.EncodeSnapshot(&conversation.Snapshot{Messages: msgs})
	if err != nil {
		return nil, err
	}
	f, err := Decode(b)
	if err != nil {
		return nil, err
	}
	return f.Messages, nil
}

// Client is a test's WebSocket connection to chatd.
type Client struct {
	t     testing.TB
	WS    *websocket.Conn
	State *State
	// Token, when set, is sent with every hello.
	Token string
	// Seen holds every sequenced frame this client received, in order.
	Seen []Frame
	// awaited is how far Await has looked through Seen.
	awaited int
}

// DialOptions are passed to websocket.Dial.
type DialOptions = websocket.DialOptions

// Dial connects to url (ws://host/v1/ws). The connection is closed when the test ends.
func Dial(t testing.TB, url string, opts *DialOptions) *Client {
	t.Helper()
	c, err := TryDial(t, url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return c
}

// TryDial is Dial that returns the error.
func TryDial(t testing.TB, url string, opts *DialOptions) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, url, opts)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	t.Cleanup(func() { ws.CloseNow() })
	return &Client{t: t, WS: ws, State: NewState()}, nil
}

// Send writes v as a JSON text frame, failing the test when v is not a client frame of
// docs/protocol.schema.json.
func (c *Client) Send(v any) {
	c.t.Helper()
	b := c.encode(v)
	if err := ValidateClientFrame(b); err != nil {
		c.t.Fatalf("send: %v", err)
	}
	c.SendRaw(websocket.MessageText, b)
}

// SendUnchecked writes v as a JSON text frame without checking it against the schema:
// for tests of what the server does with frames the protocol does not allow.
func (c *Client) SendUnchecked(v any) {
	c.t.Helper()
	c.SendRaw(websocket.MessageText, c.encode(v))
}

func (c *Client) encode(v any) []byte {
	c.t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatalf("encode frame: %v", err)
	}
	return b
}

// SendRaw writes one frame as it is, unchecked.
func (c *Client) SendRaw(typ websocket.MessageType, b []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	if err := c.WS.Write(ctx, typ, b); err != nil {
		c.t.Fatalf("write frame: %v", err)
	}
}

// TryRead reads and applies the next frame.
func (c *Client) TryRead() (Frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ReadTimeout)
	defer cancel()
	_, b, err := c.WS.Read(ctx)
	if err != nil {
		return Frame{}, err
	}
	if err := ValidateServerFrame(b); err != nil {
		return Frame{}, &ProtocolError{err}
	}
	f, err := Decode(b)
	if err != nil {
		return Frame{}, &ProtocolError{err}
	}
	if err := c.State.Apply(f); err != nil {
		return f, &ProtocolError{err}
	}
	if f.Sequenced() {
		c.Seen = append(c.Seen, f)
	}
	return f, nil
}

// Read reads and applies the next frame, failing the test on any error.
func (c *Client) Read() Frame {
	c.t.Helper()
	f, err := c.TryRead()
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return f
}

// ReadUntil reads frames until one matches, and returns it.
func (c *Client) ReadUntil(match func(Frame) bool) Frame {
	c.t.Helper()
	for {
		if f := c.Read(); match(f) {
			return f
		}
	}
}

// ReadType reads until a frame of type typ.
func (c *Client) ReadType(typ string) Frame {
	c.t.Helper()
	return c.ReadUntil(func(f Frame) bool { return f.Type == typ })
}

// ReadReply reads until the reply (ack, error, history or auth.refreshed) to requestID.
func (c *Client) ReadReply(requestID string) Frame {
	c.t.Helper()
	return c.ReadUntil(func(f Frame) bool {
		return (f.Type == "ack" || f.Type == "error" || f.Type == "history" || f.Type == "auth.refreshed") && f.RequestID == requestID
	})
}

// Await returns the first event matching match among those received after the last
// event Await returned, reading more frames when none has arrived yet. Unlike ReadUntil it
// also finds events that arrived while the client was reading something else (a reply),
// so a test can wait for events and replies in either order.
func (c *Client) Await(match func(Frame) bool) Frame {
	c.t.Helper()
	for {
		for c.awaited < len(c.Seen) {
			f := c.Seen[c.awaited]
			c.awaited++
			if match(f) {
				return f
			}
		}
		c.Read()
	}
}

// ReadTerminal awaits the end of a run and returns that event.
func (c *Client) ReadTerminal() Frame {
	c.t.Helper()
	return c.Await(Frame.Terminal)
}

// ReadToSeq reads until the state has reached seq.
func (c *Client) ReadToSeq(seq int64) {
	c.t.Helper()
	for c.State.LastSeq < seq {
		c.Read()
	}
}

// Hello sends hello for sessionID ("" for a new session) from the client's current state
// and returns the catch-up frame (snapshot or resumed).
func (c *Client) Hello(sessionID string) Frame {
	c.t.Helper()
	h := map[string]any{"type": "hello"}
	if sessionID != "" {
		h["sessionId"] = sessionID
	}
	if c.Token != "" {
		h["token"] = c.Token
	}
	if c.State.Epoch != "" {
		h["epoch"] = c.State.Epoch
		h["lastSeq"] = c.State.LastSeq
	}
	c.Send(h)
	f := c.Read()
	if f.Type != "snapshot" && f.Type != "resumed" {
		c.t.Fatalf("hello answered with %s: %s", f.Type, f.Raw)
	}
	return f
}

// Resume dials again and says hello with the state this client holds: a reconnect.
func (c *Client) Resume(url string, opts *DialOptions) (*Client, Frame) {
	c.t.Helper()
	n := Dial(c.t, url, opts)
	n.State = c.State
	f := n.Hello(c.State.SessionID)
	return n, f
}

// Chat sends chat.send and returns the ack (or error), reading past any events.
func (c *Client) Chat(requestID, content string) Frame {
	c.t.Helper()
	c.Send(map[string]any{"type": "chat.send", "requestId": requestID, "content": content})
	return c.ReadReply(requestID)
}

// ExpectClose reads until the connection closes and returns its close code (-1 when the
// connection ended without a close frame). Frames before the close are applied.
func (c *Client) ExpectClose() websocket.StatusCode {
	c.t.Helper()
	for {
		_, err := c.TryRead()
		var ce websocket.CloseError
		var pe *ProtocolError
		switch {
		case err == nil:
			continue
		case errors.As(err, &pe):
			c.t.Fatalf("read: %v", err)
		case errors.As(err, &ce):
			return ce.Code
		case errors.Is(err, context.DeadlineExceeded):
			c.t.Fatalf("connection did not close within %s", ReadTimeout)
		}
		return -1
	}
}

// ProtocolError is a frame that breaks the protocol: undecodable, not a server frame of
// docs/protocol.schema.json, or not applicable to the state (a seq gap, an unknown
// message).
type ProtocolError struct{ Err error }

func (e *ProtocolError) Error() string { return "protocol violation: " + e.Err.Error() }
func (e *ProtocolError) Unwrap() error { return e.Err }

// Header builds dial options with one request header.
func Header(key, value string) *DialOptions {
	h := http.Header{}
	h.Set(key, value)
	return &DialOptions{HTTPHeader: h}
}

// Sub is an in-process conversation.Subscriber for tests that drive an actor directly:
// it applies every frame to its State and lets the test wait for frames.
type Sub struct {
	mu      sync.Mutex
	state   *State
	frames  []Frame
	err     error
	dropped []conversation.DropReason
	signal  chan struct{}
	awaited int
}

var _ conversation.Subscriber = (*Sub)(nil)

// NewSub returns an empty subscriber.
func NewSub() *Sub { return &Sub{state: NewState(), signal: make(chan struct{}, 1)} }

// Deliver applies a live event.
func (s *Sub) Deliver(ev *conversation.Event) bool {
	return s.apply(ev.Encode(ws.Format))
}

func (s *Sub) apply(b []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := Decode(b)
	if err == nil {
		err = ValidateServerFrame(b)
	}
	if err == nil {
		err = s.state.Apply(f)
	}
	if err != nil && s.err == nil {
		s.err = &ProtocolError{err}
	}
	s.frames = append(s.frames, f)
	select {
	case s.signal <- struct{}{}:
	default:
	}
	return true
}

// CatchUp applies the answer to a hello.
func (s *Sub) CatchUp(c conversation.CatchUp) bool {
	frames, err := ws.EncodeCatchUp(c)
	if err != nil {
		panic(err)
	}
	for _, f := range frames {
		s.apply(f)
	}
	return true
}

// Dropped records why the actor let go.
func (s *Sub) Dropped(r conversation.DropReason) {
	s.mu.Lock()
	s.dropped = append(s.dropped, r)
	s.mu.Unlock()
}

// State returns a copy of the subscriber's state's messages and its active run.
func (s *Sub) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.Sorted()
}

// Frames returns every frame the subscriber received, in order.
func (s *Sub) Frames() []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}

// ActiveRun returns the active run as the subscriber holds it.
func (s *Sub) ActiveRun() *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.ActiveRun
}

// Await returns the first frame after the last one Await returned that matches, waiting
// for it to arrive, and fails the test when the frames broke the protocol.
func (s *Sub) Await(t testing.TB, match func(Frame) bool) Frame {
	t.Helper()
	timeout := time.After(ReadTimeout)
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			t.Fatalf("subscriber: %v", s.err)
		}
		for s.awaited < len(s.frames) {
			f := s.frames[s.awaited]
			s.awaited++
			if match(f) {
				s.mu.Unlock()
				return f
			}
		}
		s.mu.Unlock()
		select {
		case <-s.signal:
		case <-timeout:
			t.Fatal("no matching frame arrived")
		}
	}
}
