package conversation

import (
	"context"
	"encoding/json"

	"github.com/chatd/chatd/chat"
	"github.com/google/uuid"
)

// Agent produces the reply to one user message. Run streams its output through out and
// returns when it is done: nil for success, an error (ideally *Error, for a code the user
// sees) for failure. It must return promptly once ctx is cancelled; the actor has already
// stored the run as cancelled or interrupted by then and ignores anything emitted later.
type Agent interface {
	Run(ctx context.Context, req Request, out Emitter) error
}

// Request is what an agent is asked to do.
type Request struct {
	SessionID uuid.UUID
	RunID     uuid.UUID
	RequestID string
	// Owner is the user the session belongs to (for tools that pass it on).
	Owner string
	// Token is the bearer token the run's message was sent with (SendRequest.Token),
	// when this process has it: never for a run continued after a restart or elsewhere.
	Token string
	// Content is the user's message.
	Content string
	// History is the session's transcript before this message (oldest first, at most
	// Config.HistoryMessages of the newest): what the model should know of the
	// conversation so far.
	History []chat.Message
	// Checkpoint is what the run has already stored when it is continued rather than
	// started (after a restart, a crash, or chat.resume): its messages after the user
	// message, oldest first, as stored. nil for a new run. The agent continues from it
	// and never redoes what it holds:
	//   - settled tool calls (ok, error, denied, cancelled, interrupted) are results;
	//   - a call still awaiting_approval waits for its decision (AwaitDecision);
	//   - a call still running was cut off with its process: the agent ends it with
	//     ToolEnd, either re-running it first (a tool declared idempotent) or with
	//     ToolResult.Interrupted;
	//   - a last assistant segment that did not complete holds the partial text the
	//     model should continue from; the continuation streams as new segments.
	Checkpoint []chat.Message
	// AgentState returns the state the session's agent last reported (Emitter.State,
	// in this run or the session's runs before it, on any node), nil for none. Only
	// an agent that keeps state calls it: when this process does not know the state it
	// costs one read of the database, so call it once per model turn at most.
	AgentState func() (json.RawMessage, error)
}

// Emitter receives an agent's output, in order. Its methods must be called from one
// goroutine at a time. Each returns ErrRunEnded (or ErrStopped) once the run is over,
// and an *Error when the call itself is wrong (an unknown tool call id, say).
type Emitter interface {
	// Text appends delta to the assistant's reply. The first text after the start of
	// the run, a tool call or reasoning opens a new assistant segment.
	Text(delta string) error
	// Reasoning appends delta to the model's reasoning, shown as its own segment (an
	// assistant message of kind reasoning), opened like a text segment.
	Reasoning(delta string) error
	// EndReasoning closes the open reasoning segment, one reasoning block, keeping
	// providerData (its signature, or a redacted block's data) for the model's next
	// call; with no reasoning segment open it stores an empty one (a redacted block).
	EndReasoning(providerData json.RawMessage) error
	// ToolStart records that the agent calls a tool. It closes the open assistant
	// segment and returns once the tool message is stored.
	ToolStart(call ToolCall) error
	// ToolOutput streams output of a running tool call.
	ToolOutput(callID, text string) error
	// ToolEnd records a tool call's result and returns once it is stored.
	ToolEnd(callID string, result ToolResult) error

	// AwaitApproval records a tool call that may only run once a person approves it: it
	// is stored and published with tool status awaiting_approval, and the run waits
	// (status awaiting_approval, with the call as its pendingApproval). The channel
	// receives the first decision. An approved call is running when the decision
	// arrives, and the agent ends it with ToolEnd as usual; a denied call has been ended
	// by the actor (tool status denied, output DeclinedOutput). If the run ends first,
	// no decision comes: the agent's context is cancelled instead.
	AwaitApproval(call ToolCall) (<-chan Decision, error)
	// AwaitDecision waits, like AwaitApproval, for the decision on a call the run's
	// Checkpoint holds as awaiting_approval: the call is not stored again. It returns an
	// *Error with CodeNotFound for a call that is not waiting.
	AwaitDecision(callID string) (<-chan Decision, error)
	// Expire denies a call still waiting for its decision because its approval expired:
	// the call ends denied, with ExpiredOutput, and its decision channel receives that.
	// A call decided meanwhile keeps its decision.
	Expire(callID string) error
	// Paused records that the agent paused the session's sandbox while the run waits
	// for a decision; the run's status is paused until a decision arrives.
	Paused() error
	// Resumed records that the agent resumed the session's sandbox: a paused run waits
	// again (awaiting_approval) or runs.
	Resumed() error
	// Notice adds a system message to the run's transcript, complete, with text: what
	// the user (and the model, next time) should know of the run's circumstances, such
	// as a sandbox that was replaced. It closes the open assistant segment and returns
	// once the message is stored; it is published as message.added.
	Notice(text string) error
	// Usage adds the input and output tokens of a model call to the run's usage and
	// records its ContextTokens and ContextWindow as the latest.
	Usage(u Usage) error
	// Progress reports how far the run is: step of of ("3 of 7 pages"), with label
	// saying what the steps are (optional). Every tab sees it at once, as a run.status
	// whose run has it; it is the run's until the next report, kept when the run ends
	// or is continued after a restart, and stored write-behind (see
	// Config.ProgressStoreInterval). of must be 1 to chat.MaxProgressSteps, step 0 to
	// of, and label at most chat.MaxProgressLabel characters of valid UTF-8 with no
	// control characters (one line), or it is refused with an *Error of CodeBadRequest
	// and the run goes on; Progress(0, 0, "") clears it.
	Progress(step, of int, label string) error
	// State records the agent's state as it stands now (AG-UI's shared state: any JSON
	// value of at most chat.MaxAgentState bytes). It replaces the run's state, is stored
	// write-behind with the run like its progress, and is what Request.AgentState gives
	// back to the session's next run; no client sees it. State that is not JSON or is
	// too large is refused with an *Error of CodeBadRequest and the run goes on.
	State(state json.RawMessage) error
}

// Usage counts model tokens.
type Usage = chat.Usage

// ToolCall describes a tool invocation.
type ToolCall struct {
	// ID is unique within the run.
	ID   string
	Name string
	// Input is the call's arguments as JSON; empty means {}.
	Input json.RawMessage
}

// ToolResult is how a tool call ended.
type ToolResult struct {
	// Output is the result shown to the user and the model. When empty, the output
	// streamed with ToolOutput is kept.
	Output string
	// Err marks the call failed; the message is kept as the output when Output is empty.
	Err error
	// Interrupted marks a call of the Checkpoint that was running when its process
	// died and is not run again: it is stored with tool status interrupted (and Output,
	// or Err's message, as what the model is told).
	Interrupted bool
}

// AgentFunc adapts a function to the Agent interface.
type AgentFunc func(ctx context.Context, req Request, out Emitter) error

// Run calls f.
func (f AgentFunc) Run(ctx context.Context, req Request, out Emitter) error { return f(ctx, req, out) }

// Steerer is what an agent's Emitter also offers when messages may reach a run while it
// runs (the steer policy). An agent that can take them calls Steering at each step
// boundary (after a model call, after a step's tool results): the messages sent since,
// oldest first, now stored as user messages of the run, for the agent to add to the
// conversation as user turns before its next model call. ErrRunEnded when the run ended.
type Steerer interface {
	Steering() ([]string, error)
}
