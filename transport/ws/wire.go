package ws

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// Client frame types.
const (
	typeHello        = "hello"
	typeChatSend     = "chat.send"
	typeChatCancel   = "chat.cancel"
	typeToolDecide   = "tool.decide"
	typeChatResume   = "chat.resume"
	typeHistoryFetch = "history.fetch"
	typeChatDismiss  = "chat.dismiss"
	typeAuthRefresh  = "auth.refresh"
	// typeApprovalRevoke revokes one of the session's approval rules.
	typeApprovalRevoke = "approval.revoke"
	// typeChatUnqueue takes back a queued message (its requestId) before its run starts.
	typeChatUnqueue = "chat.unqueue"
	// typeChatRegenerate answers a run's user message again, as a new branch.
	typeChatRegenerate = "chat.regenerate"
	// typeBranchSelect makes the branch through a message the active path.
	typeBranchSelect = "branch.select"
)

// Server frames about the connection's token (expiry.go).
const (
	frameAuthExpiring  = "auth.expiring"
	frameAuthRefreshed = "auth.refreshed"
)

// Error codes the transport adds to conversation's.
const (
	codeUnknownType = "unknown_type"
	// codeBusy: the connection has MaxQueuedCommands commands waiting or being handled.
	codeBusy = "busy"
)

// clientFrame holds every field any client frame may carry. Pointers tell a missing field
// from a zero one where the protocol cares.
type clientFrame struct {
	Type       string  `json:"type"`
	RequestID  *string `json:"requestId"`
	SessionID  *string `json:"sessionId"`
	Epoch      *string `json:"epoch"`
	LastSeq    *int64  `json:"lastSeq"`
	Token      string  `json:"token"`
	Content    *string `json:"content"`
	RunID      *string `json:"runId"`
	ToolCallID string  `json:"toolCallId"`
	Decision   string  `json:"decision"`
	Before     *int64  `json:"before"`
	Limit      *int    `json:"limit"`
	Mode       string  `json:"mode"`
	InputHash  string  `json:"inputHash"`
	Scope      string  `json:"scope"`
	RuleID     string  `json:"ruleId"`
	// WhileRunning is chat.send's policy for a send during an active run.
	WhileRunning string `json:"whileRunning"`
	// EditOf is the user message a chat.send edits.
	EditOf *string `json:"editOf"`
	// MessageID is the message branch.select shows the branch through.
	MessageID *string `json:"messageId"`
	// Through: history.fetch reads the branch through this message.
	Through *string `json:"through"`

	// raw is the frame as it came, for a relay to send on.
	raw []byte
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type wireTool struct {
	CallID    string          `json:"callId"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	InputHash string          `json:"inputHash,omitempty"`
	Output    *string         `json:"output,omitempty"`
	Status    string          `json:"status"`
	Decision  *wireDecision   `json:"decision,omitempty"`
}

type wireDecision struct {
	Approved bool       `json:"approved"`
	By       string     `json:"by,omitempty"`
	At       time.Time  `json:"at"`
	Via      string     `json:"via,omitempty"`
	RuleID   *uuid.UUID `json:"ruleId,omitempty"`
}

type wireRule struct {
	RuleID     uuid.UUID `json:"ruleId"`
	Tool       string    `json:"tool"`
	Command    *string   `json:"command,omitempty"`
	CreatedBy  string    `json:"createdBy"`
	CreatedVia string    `json:"createdVia"`
	ToolCallID string    `json:"toolCallId"`
	CreatedAt  time.Time `json:"createdAt"`
}

func toWireRules(rs []chat.ApprovalRule) []wireRule {
	out := make([]wireRule, len(rs))
	for i, r := range rs {
		out[i] = wireRule{RuleID: r.ID, Tool: r.Tool, Command: r.Command, CreatedBy: r.CreatedBy, CreatedVia: r.CreatedVia, ToolCallID: r.ToolCallID, CreatedAt: r.CreatedAt}
	}
	return out
}

type wireMessage struct {
	ID        uuid.UUID   `json:"id"`
	Position  int64       `json:"position"`
	Role      string      `json:"role"`
	Kind      string      `json:"kind,omitempty"` // "reasoning"; absent for text
	Content   string      `json:"content"`
	Status    string      `json:"status"`
	RunID     *uuid.UUID  `json:"runId,omitempty"`
	RequestID string      `json:"requestId,omitempty"`
	CreatedAt time.Time   `json:"createdAt"`
	Error     *wireError  `json:"error,omitempty"`
	Tool      *wireTool   `json:"tool,omitempty"`
	ParentID  *uuid.UUID  `json:"parentId,omitempty"` // absent for a first message
	Branch    *wireBranch `json:"branch,omitempty"`   // one of several alternatives
}

// wireBranch is where a message stands among its parent's children.
type wireBranch struct {
	Siblings []uuid.UUID `json:"siblings"`
	Index    int         `json:"index"`
}

type wireUsage struct {
	InputTokens   int64 `json:"inputTokens"`
	OutputTokens  int64 `json:"outputTokens"`
	ContextTokens int64 `json:"contextTokens,omitempty"`
	ContextWindow int64 `json:"contextWindow,omitempty"`
}

// WireProgress is a run's progress as protocol v1 (and the sessions list) sends it.
type WireProgress struct {
	Step  int    `json:"step"`
	Of    int    `json:"of"`
	Label string `json:"label,omitempty"`
}

// ToWireProgress is p on the wire; nil for none.
func ToWireProgress(p *chat.Progress) *WireProgress {
	if p == nil {
		return nil
	}
	return &WireProgress{Step: p.Step, Of: p.Of, Label: p.Label}
}

type wirePendingApproval struct {
	ToolCallID string          `json:"toolCallId"`
	Name       string          `json:"name"`
	Input      json.RawMessage `json:"input"`
	InputHash  string          `json:"inputHash"`
}

type wireRun struct {
	RunID           uuid.UUID            `json:"runId"`
	RequestID       string               `json:"requestId"`
	Status          string               `json:"status"`
	StartedAt       time.Time            `json:"startedAt"`
	EndedAt         *time.Time           `json:"endedAt,omitempty"`
	LastActivityAt  time.Time            `json:"lastActivityAt"`
	Error           *wireError           `json:"error,omitempty"`
	PendingApproval *wirePendingApproval `json:"pendingApproval,omitempty"`
	CancelReason    string               `json:"cancelReason,omitempty"`
	Model           string               `json:"model,omitempty"`
	Usage           *wireUsage           `json:"usage,omitempty"`
	Progress        *WireProgress        `json:"progress,omitempty"`
	Resumable       bool                 `json:"resumable,omitempty"`
	Recoveries      int                  `json:"recoveries,omitempty"`
	RetryOf         *uuid.UUID           `json:"retryOf,omitempty"`
}

// wireEvent is every sequenced event; omitempty keeps each type to its own fields.
type wireEvent struct {
	Type        string        `json:"type"`
	Seq         int64         `json:"seq"`
	RunID       *uuid.UUID    `json:"runId,omitempty"` // absent only on approval.rules outside a run
	RequestID   string        `json:"requestId"`       // "" on approval.rules outside a run
	Run         *wireRun      `json:"run,omitempty"`
	UserMessage *wireMessage  `json:"userMessage,omitempty"`
	Message     *wireMessage  `json:"message,omitempty"`
	MessageID   *uuid.UUID    `json:"messageId,omitempty"`
	Text        *string       `json:"text,omitempty"`
	Status      string        `json:"status,omitempty"`
	Error       *wireError    `json:"error,omitempty"`
	Rules       *[]wireRule   `json:"rules,omitempty"`  // approval.rules only, [] for none
	Queued      *[]wireQueued `json:"queued,omitempty"` // queue.updated only, [] for none
	// branch.selected only: the new active path's newest messages.
	Messages *[]wireMessage `json:"messages,omitempty"`
	HasMore  *bool          `json:"hasMore,omitempty"`
	LeafID   *uuid.UUID     `json:"leafId,omitempty"`
}

// wireQueued is a message waiting behind the active run (the queue policy).
type wireQueued struct {
	RequestID string    `json:"requestId"`
	Content   string    `json:"content"`
	Status    string    `json:"status"` // "queued", or "steering" while it waits for the run's next step
	CreatedAt time.Time `json:"createdAt"`
}

func toWireQueued(q []chat.Queued) []wireQueued {
	out := make([]wireQueued, len(q))
	for i, m := range q {
		st := "queued"
		if m.Steering {
			st = "steering"
		}
		out[i] = wireQueued{RequestID: m.RequestID, Content: m.Content, Status: st, CreatedAt: m.CreatedAt}
	}
	return out
}

type wireSnapshot struct {
	Type      string        `json:"type"`
	RequestID string        `json:"requestId,omitempty"`
	SessionID uuid.UUID     `json:"sessionId"`
	Epoch     string        `json:"epoch"`
	LastSeq   int64         `json:"lastSeq"`
	Messages  []wireMessage `json:"messages"`
	HasMore   bool          `json:"hasMore"`
	ActiveRun *wireRun      `json:"activeRun"`
	LastRun   *wireRun      `json:"lastRun,omitempty"`
	// ApprovalRules: the session's standing approvals (approval.rules updates them).
	ApprovalRules []wireRule `json:"approvalRules"`
	// Queued: the messages waiting behind the active run, oldest first (queue.updated
	// updates them).
	Queued []wireQueued `json:"queued"`
}

type wireResumed struct {
	Type      string    `json:"type"`
	RequestID string    `json:"requestId,omitempty"`
	SessionID uuid.UUID `json:"sessionId"`
	Epoch     string    `json:"epoch"`
	LastSeq   int64     `json:"lastSeq"`
}

type wireAck struct {
	Type      string     `json:"type"`
	RequestID *string    `json:"requestId,omitempty"`
	RunID     *uuid.UUID `json:"runId,omitempty"`
	Duplicate bool       `json:"duplicate"`
	Status    string     `json:"status,omitempty"`
}

type wireErrorReply struct {
	Type      string  `json:"type"`
	RequestID *string `json:"requestId,omitempty"`
	Code      string  `json:"code"`
	Message   string  `json:"message"`
}

type wireHistory struct {
	Type      string        `json:"type"`
	RequestID *string       `json:"requestId,omitempty"`
	Messages  []wireMessage `json:"messages"`
	HasMore   bool          `json:"hasMore"`
}

func toWireError(e *chat.ErrorInfo) *wireError {
	if e == nil {
		return nil
	}
	return &wireError{Code: e.Code, Message: e.Message}
}

func toWireMessage(m chat.Message) wireMessage {
	w := wireMessage{
		ID:        m.ID,
		Position:  m.Position,
		Role:      string(m.Role),
		Content:   m.Content,
		Kind:      wireKind(m.Kind),
		Status:    string(m.Status),
		RunID:     m.RunID,
		RequestID: m.RequestID,
		CreatedAt: m.CreatedAt,
		Error:     toWireError(m.Error),
		ParentID:  m.ParentID,
	}
	if b := m.Branch; b != nil {
		w.Branch = &wireBranch{Siblings: b.Siblings, Index: b.Index}
	}
	if m.Tool != nil {
		w.Tool = &wireTool{
			CallID: m.Tool.CallID,
			Name:   m.Tool.Name,
			Input:  m.Tool.Input,
			Output: m.Tool.Output,
			Status: string(m.Tool.Status),
		}
		if m.Tool.Status == chat.ToolAwaitingApproval {
			w.Tool.InputHash = chat.InputHash(m.Tool.Input)
		}
		if d := m.Tool.Decision; d != nil {
			w.Tool.Decision = &wireDecision{Approved: d.Approved, By: d.By, At: d.At, Via: d.Via, RuleID: d.RuleID}
		}
	}
	return w
}

func wireKind(k chat.MessageKind) string {
	if k == chat.KindReasoning {
		return string(k)
	}
	return ""
}

// MessagesJSON is ms as protocol v1 sends them (a history's messages): for the HTTP API's
// reads of a transcript.
func MessagesJSON(ms []chat.Message) json.RawMessage {
	b, err := json.Marshal(toWireMessages(ms))
	if err != nil {
		return json.RawMessage("[]") // a message always encodes; never reached
	}
	return b
}

func toWireMessages(ms []chat.Message) []wireMessage {
	out := make([]wireMessage, len(ms))
	for i, m := range ms {
		out[i] = toWireMessage(m)
	}
	return out
}

// RunJSON is a run as the protocol shows it (protocol.schema.json's Run), for chatd's
// HTTP endpoints.
func RunJSON(r chat.Run) any { return toWireRun(&r) }

func toWireRun(r *chat.Run) *wireRun {
	if r == nil {
		return nil
	}
	w := &wireRun{
		RunID:          r.ID,
		RequestID:      r.RequestID,
		Status:         string(r.Status),
		StartedAt:      r.StartedAt,
		EndedAt:        r.EndedAt,
		LastActivityAt: r.LastActivityAt,
		Error:          toWireError(r.Error),
		CancelReason:   string(r.CancelReason),
		Model:          r.Model,
		Resumable:      r.Resumable,
		Recoveries:     r.Recoveries,
		RetryOf:        r.RetryOf,
		Progress:       ToWireProgress(r.Progress),
	}
	if p := r.PendingApproval; p != nil {
		w.PendingApproval = &wirePendingApproval{ToolCallID: p.ToolCallID, Name: p.Name, Input: p.Input, InputHash: chat.InputHash(p.Input)}
	}
	if r.Usage != (chat.Usage{}) {
		w.Usage = &wireUsage{
			InputTokens:   r.Usage.InputTokens,
			OutputTokens:  r.Usage.OutputTokens,
			ContextTokens: r.Usage.ContextTokens,
			ContextWindow: r.Usage.ContextWindow,
		}
	}
	return w
}

// Format is protocol version 1's JSON encoding of events. Events cache their encoding
// per format, so an event is encoded once however many connections and replays send it.
var Format = conversation.NewAppendFormat("chatd.v1", AppendEvent)

// AppendEvent appends EncodeEvent's encoding of ev to dst (nil for a new buffer). A
// delta's or a tool output's frame is written into dst directly.
func AppendEvent(dst []byte, ev *conversation.Event) []byte {
	if ev.Type == conversation.EventDelta || ev.Type == conversation.EventToolOutput {
		if dst == nil {
			dst = make([]byte, 0, 160+len(ev.RequestID)+len(ev.Text))
		}
		return appendTextEvent(dst, ev)
	}
	if dst == nil {
		return EncodeEvent(ev)
	}
	return append(dst, EncodeEvent(ev)...)
}

// EncodeEvent encodes a sequenced event. It cannot fail: the domain types always encode,
// and if one ever did not, the event goes out without its details rather than leave a
// gap in the client's seqs.
func EncodeEvent(ev *conversation.Event) []byte {
	if ev.Type == conversation.EventDelta || ev.Type == conversation.EventToolOutput {
		return appendTextEvent(make([]byte, 0, 160+len(ev.RequestID)+len(ev.Text)), ev)
	}
	w := wireEvent{
		Type:      string(ev.Type),
		Seq:       ev.Seq,
		RunID:     optionalRunID(ev.RunID),
		RequestID: ev.RequestID,
		Run:       toWireRun(ev.Run),
		Status:    string(ev.Status),
		Error:     toWireError(ev.Error),
	}
	if ev.Message != nil {
		m := toWireMessage(*ev.Message)
		if ev.Type == conversation.EventChatStarted {
			w.UserMessage = &m
		} else {
			w.Message = &m
		}
	}
	switch ev.Type {
	case conversation.EventDelta, conversation.EventToolOutput:
		w.MessageID = &ev.MessageID
		w.Text = &ev.Text
	case conversation.EventSegmentEnded:
		w.MessageID = &ev.MessageID
	case conversation.EventApprovalRules:
		rules := toWireRules(ev.Rules)
		w.Rules = &rules
	case conversation.EventQueue:
		q := toWireQueued(ev.Queued)
		w.Queued = &q
	case conversation.EventBranch:
		ms := toWireMessages(ev.Messages)
		w.Messages, w.HasMore, w.LeafID = &ms, &ev.HasMore, ev.Leaf
	}
	b, err := json.Marshal(w)
	if err != nil {
		b, _ = json.Marshal(wireEvent{Type: string(ev.Type), Seq: ev.Seq, RunID: optionalRunID(ev.RunID), RequestID: ev.RequestID})
	}
	return b
}

func optionalRunID(id uuid.UUID) *uuid.UUID {
	if id == uuid.Nil {
		return nil
	}
	return &id
}

// EncodeSnapshot encodes a snapshot frame.
func EncodeSnapshot(s *conversation.Snapshot) ([]byte, error) {
	return json.Marshal(wireSnapshot{
		Type:      "snapshot",
		RequestID: s.RequestID,
		SessionID: s.SessionID,
		Epoch:     s.Epoch,
		LastSeq:   s.LastSeq,
		Messages:  toWireMessages(s.Messages),
		HasMore:   s.HasMore,
		ActiveRun: toWireRun(s.ActiveRun),
		LastRun:   toWireRun(s.LastRun),

		ApprovalRules: toWireRules(s.ApprovalRules),
		Queued:        toWireQueued(s.Queued),
	})
}

// EncodeResumed encodes a resumed frame.
func EncodeResumed(r *conversation.Resumed) ([]byte, error) {
	return json.Marshal(wireResumed{Type: "resumed", RequestID: r.RequestID, SessionID: r.SessionID, Epoch: r.Epoch, LastSeq: r.LastSeq})
}

// EncodeCatchUp encodes the answer to a hello: a snapshot, or resumed and the replayed
// events (encoded once per format: a replayed event reuses its live encoding).
func EncodeCatchUp(c conversation.CatchUp) ([][]byte, error) {
	if c.Snapshot != nil {
		b, err := EncodeSnapshot(c.Snapshot)
		if err != nil {
			return nil, err
		}
		return [][]byte{b}, nil
	}
	frames := make([][]byte, 0, 1+len(c.Events))
	if c.Resumed != nil {
		b, err := EncodeResumed(c.Resumed)
		if err != nil {
			return nil, err
		}
		frames = append(frames, b)
	}
	for _, ev := range c.Events {
		frames = append(frames, ev.Encode(Format))
	}
	return frames, nil
}

// appendTextEvent encodes chat.delta and tool.output, nearly every frame chatd sends, by
// hand: the same bytes json.Marshal gives for their wireEvent, without its reflection and
// allocations.
func appendTextEvent(b []byte, ev *conversation.Event) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, string(ev.Type))
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"runId":"`...)
	b = appendUUID(b, ev.RunID)
	b = append(b, `","requestId":`...)
	b = appendJSONString(b, ev.RequestID)
	b = append(b, `,"messageId":"`...)
	b = appendUUID(b, ev.MessageID)
	b = append(b, `","text":`...)
	b = appendJSONString(b, ev.Text)
	return append(b, '}')
}

func appendUUID(b []byte, id uuid.UUID) []byte {
	var buf [36]byte
	hex.Encode(buf[:8], id[:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], id[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], id[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], id[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:], id[10:])
	return append(b, buf[:]...)
}

// appendJSONString appends s as encoding/json writes it. Strings it would escape (control
// characters, quotes, backslashes, the HTML characters <, > and &, invalid UTF-8, U+2028
// and U+2029) are rare in model text and go through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return appendMarshalled(b, s)
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii && (!utf8.ValidString(s) || strings.ContainsRune(s, '\u2028') || strings.ContainsRune(s, '\u2029')) {
		return appendMarshalled(b, s)
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendMarshalled(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}
