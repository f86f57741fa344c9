package chat

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/google/uuid"
)

// RunStatus is where a run is in its life. The first three are active; the others are
// terminal and never change again.
type RunStatus string

// Run statuses, as stored and as sent on the wire.
const (
	RunRunning          RunStatus = "running"
	RunAwaitingApproval RunStatus = "awaiting_approval"
	RunPaused           RunStatus = "paused"
	RunDone             RunStatus = "done"
	RunError            RunStatus = "error"
	RunCancelled        RunStatus = "cancelled"
	RunInterrupted      RunStatus = "interrupted"
)

// Active reports whether a run with this status has not ended yet.
func (s RunStatus) Active() bool {
	return s == RunRunning || s == RunAwaitingApproval || s == RunPaused
}

// ActiveRunStatuses returns the statuses for which Active is true: what a write to a run
// that has not ended expects to find, so the list is not repeated by every caller. Each
// call returns a new slice, which the caller may change.
func ActiveRunStatuses() []RunStatus {
	return []RunStatus{RunRunning, RunAwaitingApproval, RunPaused}
}

// Role says who a message is from.
type Role string

// Message roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
	RoleSystem    Role = "system"
)

// MessageKind tells an assistant's text from its reasoning.
type MessageKind string

// Message kinds.
const (
	KindText      MessageKind = "text"
	KindReasoning MessageKind = "reasoning"
)

// MessageStatus is the state of one message. An assistant segment is streaming while its
// text arrives and complete once closed; a tool message is streaming while its call runs.
type MessageStatus string

// Message statuses.
const (
	MessageComplete    MessageStatus = "complete"
	MessageStreaming   MessageStatus = "streaming"
	MessageCancelled   MessageStatus = "cancelled"
	MessageError       MessageStatus = "error"
	MessageInterrupted MessageStatus = "interrupted"
)

// ToolStatus is the state of a tool call.
type ToolStatus string

// Tool call statuses.
const (
	ToolRunning          ToolStatus = "running"
	ToolAwaitingApproval ToolStatus = "awaiting_approval"
	ToolOK               ToolStatus = "ok"
	ToolError            ToolStatus = "error"
	ToolDenied           ToolStatus = "denied"
	ToolCancelled        ToolStatus = "cancelled"
	// ToolInterrupted: the call was running when its process died, so whether it had
	// any effect is unknown.
	ToolInterrupted ToolStatus = "interrupted"
)

// ErrorInfo is an error as users see it: a stable code and a readable message.
type ErrorInfo struct {
	Code    string
	Message string
}

// Session is one conversation.
type Session struct {
	ID        uuid.UUID
	Owner     string // the authenticated user id; "" when authentication is off
	Title     string
	SandboxID string // the session's sandbox, reused by its runs; "" for none yet
	CreatedAt time.Time
	UpdatedAt time.Time
	// DeletedAt is set on a deleted session's tombstone: its runs and messages are gone,
	// and its id can never be used again.
	DeletedAt *time.Time
	// ActiveLeaf is the last message of the session's active path (nil: it has none):
	// the path is its ancestors and itself, what the session's tabs show and what its
	// next message answers.
	ActiveLeaf *uuid.UUID
}

// SessionSummary is a session as the conversation list shows it.
type SessionSummary struct {
	ID        uuid.UUID
	Title     string
	CreatedAt time.Time
	// ActiveAt is when the session's latest run started (or was continued by a person):
	// the list's order. CreatedAt for a session with no run yet.
	ActiveAt time.Time
	// Preview is the start of the newest user or assistant text message, "" when none.
	Preview string
	// ActiveRunID and ActiveRunStatus name the session's active run; uuid.Nil and ""
	// when none is active.
	ActiveRunID     uuid.UUID
	ActiveRunStatus RunStatus
	// ContextTokens and ContextWindow are the context usage of the session's latest run,
	// both 0 when none was reported.
	ContextTokens int64
	ContextWindow int64
	// Progress is the latest run's progress as last stored, nil when it reported none.
	Progress *Progress
}

// SessionCursor is where a page of the conversation list ends: the next page starts with
// the session after it in the list's order (ActiveAt, then ID, both descending).
type SessionCursor struct {
	ActiveAt time.Time
	ID       uuid.UUID
}

// SessionSandbox names a session's sandbox: what the sandbox janitor acts on.
type SessionSandbox struct {
	SessionID uuid.UUID
	SandboxID string
}

// Workspace names the workspace of a sandbox that is no longer its session's, due for
// removal: what the sandbox janitor removes.
type Workspace struct {
	SessionID uuid.UUID
	SandboxID string
	// SessionDeleted says the session was deleted: the workspace goes whatever the
	// retention.
	SessionDeleted bool
}

// CancelReason says why a run was cancelled or interrupted.
type CancelReason string

// Cancel reasons.
const (
	CancelUser      CancelReason = "user"
	CancelAbandoned CancelReason = "abandoned"
	CancelShutdown  CancelReason = "shutdown"
	// CancelNewMessage: a message sent with the interrupt policy (DoubleText) replaced
	// the run; its partial is kept.
	CancelNewMessage CancelReason = "new_message"
)

// DoubleText says what a message sent while a run is active does (a chat.send's
// whileRunning, CHATD_DOUBLE_TEXT).
type DoubleText string

// The policies for a message sent mid-run.
const (
	// DoubleTextReject answers run_active and stores nothing.
	DoubleTextReject DoubleText = "reject"
	// DoubleTextInterrupt cancels the active run (its partial kept, cancelReason
	// new_message) and starts a run with the message.
	DoubleTextInterrupt DoubleText = "interrupt"
	// DoubleTextQueue stores the message as queued at once; it starts a run when the
	// active one (and those queued before it) ended.
	DoubleTextQueue DoubleText = "queue"
	// DoubleTextSteer stores the message and gives it to the running agent at its next
	// step boundary, as a user turn inside the same run; a run that ends before one
	// leaves it queued.
	DoubleTextSteer DoubleText = "steer"
)

// Valid reports whether p is a policy this chatd carries out ("" is not one).
func (p DoubleText) Valid() bool {
	return p == DoubleTextReject || p == DoubleTextInterrupt || p == DoubleTextQueue || p == DoubleTextSteer
}

// PendingApproval is the tool call a run waits on. It is not a column: it is derived from
// the run's tool messages whose tool status is awaiting_approval.
type PendingApproval struct {
	ToolCallID string
	Name       string
	Input      json.RawMessage
}

// Usage counts the model tokens a run consumed, and how full the model's context window
// was at its latest call.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// ContextTokens are the input tokens of the latest model call: the conversation's
	// size as the model saw it. ContextWindow is what they count against (0: unknown).
	ContextTokens int64
	ContextWindow int64
}

// Progress is how far a long run is, as its agent or one of its tools last reported it:
// Step of Of ("3 of 7 pages"), with an optional Label saying what the steps are or what
// the current one does.
type Progress struct {
	Step  int
	Of    int
	Label string
}

// Progress limits: Of is 1 to MaxProgressSteps, Step 0 to Of, and Label at most
// MaxProgressLabel characters of valid UTF-8.
const (
	MaxProgressSteps = 1_000_000
	MaxProgressLabel = 200
	// MaxAgentState bounds Run.AgentState, in bytes of JSON.
	MaxAgentState = 256 << 10
)

// Run is one user message and everything produced for it.
type Run struct {
	ID             uuid.UUID
	SessionID      uuid.UUID
	RequestID      string
	Status         RunStatus
	Error          *ErrorInfo
	StartedAt      time.Time
	EndedAt        *time.Time
	LastActivityAt time.Time
	Usage          Usage
	// Progress is the run's progress as last reported, nil when none was.
	Progress *Progress
	// AgentState is the state the run's agent last reported (an AG-UI agent's shared
	// state, a JSON value of at most MaxAgentState bytes), nil when it reported none.
	// It is the agent's, given back to it on the session's next request; no transport
	// shows it.
	AgentState   json.RawMessage `json:"-"`
	Model        string
	CancelReason CancelReason // "" unless cancelled or interrupted for a reason
	// Recoveries counts how often the run was continued after its process died.
	Recoveries int
	// DismissedAt is when a person chose to keep the ended run as it is.
	DismissedAt *time.Time
	// ResumeRequestIDs are the requestIds of the chat.resumes that continued the run.
	ResumeRequestIDs []string
	// RetryOf is the run whose answer this one regenerates (chat.regenerate, or
	// chat.resume's retry): it answers that run's user message and has none of its own;
	// its answer is a branch beside the older one.
	RetryOf *uuid.UUID
	// Resumable is set while the run can be continued: it is the session's latest run,
	// it ended interrupted, error or cancelled, and was not dismissed (never stored).
	Resumable bool
	// PendingApproval is set while the run waits for a decision (never stored).
	PendingApproval *PendingApproval
}

// ToolCall is the tool part of a message with role tool.
type ToolCall struct {
	CallID string
	Name   string
	Input  json.RawMessage
	Output *string
	Status ToolStatus
	// Decision is how a call that needed approval was decided; nil while it waits, and
	// for calls that needed none.
	Decision *ToolDecision
}

// How a tool call's approval was decided (ToolDecision.Via): through a transport, by a
// session's approval rule, or by its expiry.
const (
	DecidedViaWS     = "ws"
	DecidedViaAISDK  = "aisdk"
	DecidedViaHTTP   = "http"
	DecidedViaRule   = "rule"
	DecidedViaExpiry = "expiry"
)

// ToolDecision records who decided a tool call's approval, when and how. It is stored
// with the call as JSON, in these field names.
type ToolDecision struct {
	Approved bool       `json:"approved"`
	By       string     `json:"by,omitempty"` // the user id; "" for an expiry
	At       time.Time  `json:"at"`
	Via      string     `json:"via"`              // DecidedVia*
	RuleID   *uuid.UUID `json:"ruleId,omitempty"` // the rule that approved it (Via "rule")
}

// ApprovalRule is a session's standing approval ("allow for this conversation"): later
// calls of Tool run without asking; of a shell tool only those whose command's first word
// is Command.
type ApprovalRule struct {
	ID         uuid.UUID
	SessionID  uuid.UUID
	Tool       string
	Command    *string
	CreatedBy  string
	CreatedVia string
	ToolCallID string // the call whose decision made it
	CreatedAt  time.Time
}

// Message is one entry of a session's transcript.
type Message struct {
	ID        uuid.UUID
	SessionID uuid.UUID
	RunID     *uuid.UUID
	RequestID string // the request id of RunID's run; "" without a run
	Position  int64
	Role      Role
	Kind      MessageKind // text (also for user and tool messages) or reasoning
	Content   string
	Status    MessageStatus
	Error     *ErrorInfo
	Tool      *ToolCall // set for role tool
	// ParentID is the message before this one on its branch; nil for the first message
	// of the conversation (of each of its first branches, when the first question was
	// edited).
	ParentID *uuid.UUID
	// Branch is set on a message that is one of several alternatives (its parent has
	// other children): an edited question, a regenerated answer. Never stored: it is read
	// with the message.
	Branch *Branch
	// ProviderData is what the model provider needs back with this message and clients
	// do not see: a reasoning block's signature, say.
	ProviderData json.RawMessage
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Branch is where a message stands among its parent's children (the alternatives at a
// branch point): Siblings in the order they were made, Index its own place among them.
type Branch struct {
	Siblings []uuid.UUID
	Index    int
}

// BranchOf returns the Branch of message id among siblings (its parent's children, in
// the order they were made), nil when it has none.
func BranchOf(id uuid.UUID, siblings []uuid.UUID) *Branch {
	if len(siblings) < 2 {
		return nil
	}
	for i, s := range siblings {
		if s == id {
			return &Branch{Siblings: slices.Clone(siblings), Index: i}
		}
	}
	return nil
}

// Timestamp rounds t the way PostgreSQL stores a timestamptz (microseconds, UTC), so a
// value kept in memory equals the same value read back.
func Timestamp(t time.Time) time.Time {
	return t.UTC().Round(time.Microsecond)
}

// Queued is a message sent with the queue policy while a run was active: stored at once,
// it starts its own run, in order, when the runs before it have ended.
type Queued struct {
	SessionID uuid.UUID
	RequestID string
	Content   string
	CreatedAt time.Time
	// Steering: sent with the steer policy, it waits for the active run's next step
	// boundary rather than for the run's end. Not stored: after a restart, or once the
	// run ended, it is queued.
	Steering bool
}
