package conversation

import (
	"strings"
	"sync"

	"github.com/chatd/chatd/chat"
	"github.com/google/uuid"
)

// EventType names a sequenced event. The values are the protocol's event types.
type EventType string

// Sequenced events.
const (
	EventChatStarted    EventType = "chat.started"
	EventSegmentStarted EventType = "assistant.segment.started"
	EventDelta          EventType = "chat.delta"
	EventSegmentEnded   EventType = "assistant.segment.ended"
	EventToolStart      EventType = "tool.start"
	EventToolOutput     EventType = "tool.output"
	EventToolUpdate     EventType = "tool.update"
	EventToolEnd        EventType = "tool.end"
	EventMessageAdded   EventType = "message.added"
	EventRunStatus      EventType = "run.status"
	EventChatDone       EventType = "chat.done"
	EventChatError      EventType = "chat.error"
	EventChatCancelled  EventType = "chat.cancelled"
	// EventApprovalRules: the session's approval rules changed (one was made or
	// revoked). Rules is the whole list. RunID is the run it happened in, if any.
	EventApprovalRules EventType = "approval.rules"
	// EventQueue: the session's queued messages changed (one was queued, started its
	// run, or was taken back). Queued is the whole list, oldest first.
	EventQueue EventType = "queue.updated"
	// EventBranch: the session's active path changed (a branch was selected, a message
	// edited, an answer regenerated). Messages are the newest of the new path (HasMore:
	// older ones exist), Leaf its last message (nil: it is empty).
	EventBranch EventType = "branch.selected"
)

// Event is one sequenced change to a session. Which fields are set depends on Type:
//
//	chat.started               Run, Message (the user message)
//	assistant.segment.started  Message
//	chat.delta                 MessageID, Text
//	assistant.segment.ended    MessageID, Status, Error (when the segment failed)
//	tool.start, tool.update, tool.end  Message
//	message.added              Message (a complete message, such as a system notice)
//	tool.output                MessageID, Text
//	run.status, chat.done, chat.error, chat.cancelled  Run
type Event struct {
	Seq       int64
	Type      EventType
	RunID     uuid.UUID
	RequestID string
	Run       *chat.Run
	Message   *chat.Message
	MessageID uuid.UUID
	Text      string
	Status    chat.MessageStatus
	Error     *chat.ErrorInfo
	Rules     []chat.ApprovalRule // approval.rules
	Queued    []chat.Queued       // queue.updated
	Messages  []chat.Message      // branch.selected
	HasMore   bool                // branch.selected
	Leaf      *uuid.UUID          // branch.selected

	// enc caches the event's encodings, one per Format that asked for it; set when the
	// event is published.
	enc *encodings
	// src, for a delta, is the text of its message that Text was just appended to: the
	// ring keeps the delta as where it lies in that text.
	src *strings.Builder
}

// Terminal reports whether the event ends a run.
func (e *Event) Terminal() bool {
	return e.Type == EventChatDone || e.Type == EventChatError || e.Type == EventChatCancelled
}

// delta reports whether the event is a chat.delta or tool.output and carries nothing but
// a delta's fields (Seq, Type, RunID, RequestID, MessageID, Text): what the ring can keep
// compact and build again.
func (e *Event) delta() bool {
	return (e.Type == EventDelta || e.Type == EventToolOutput) &&
		e.Run == nil && e.Message == nil && e.Status == "" && e.Error == nil &&
		e.Rules == nil && e.Queued == nil && e.Messages == nil && !e.HasMore && e.Leaf == nil
}

// Format is a wire format of events: one per transport protocol (protocol v1's JSON, the
// AI SDK's stream parts). Events cache their encoding per Format, so an event fanned out
// to many subscribers of one format is encoded once.
type Format struct {
	name   string
	encode func(*Event) []byte
	// appendTo, when set, encodes into the buffer it is given (NewAppendFormat).
	appendTo func(dst []byte, e *Event) []byte
}

// NewFormat returns a format that encodes with encode. encode must not fail: an event it
// cannot express fully it encodes as well as it can, since a missing frame would leave a
// gap in the subscriber's seqs.
func NewFormat(name string, encode func(*Event) []byte) *Format {
	return &Format{name: name, encode: encode}
}

// NewAppendFormat returns a format that encodes by appending to dst (nil for a new
// buffer), returning the extended slice, as append does. The actor then reuses the
// buffer of a delta's encoding that nothing kept for the next delta's, instead of
// allocating a frame per event (see Actor.publish).
func NewAppendFormat(name string, appendEvent func(dst []byte, e *Event) []byte) *Format {
	return &Format{name: name, encode: func(e *Event) []byte { return appendEvent(nil, e) }, appendTo: appendEvent}
}

// Name returns the format's name.
func (f *Format) Name() string { return f.name }

type encodings struct {
	mu sync.Mutex
	// first is the first format's encoding (most events are encoded in one format
	// only: no slice to allocate), more the others'.
	first encoded
	more  []encoded
	// spare is a buffer nothing refers to any more (an earlier event's encoding), for
	// the first encoding in a format that appends.
	spare []byte
}

// maxReusedEncoding bounds the buffer an actor keeps for its next event's encoding.
const maxReusedEncoding = 2 << 10

// reusable returns a buffer for the next event's encoding, once nothing refers to this
// event's any more: its only encoding's, when its format appends and it is small, or
// the spare it was given and did not use.
func (c *encodings) reusable() []byte {
	if c.first.f == nil {
		return c.spare
	}
	if c.more != nil || c.first.f.appendTo == nil || cap(c.first.b) > maxReusedEncoding {
		return nil
	}
	return c.first.b[:0]
}

// publishedEvent is a published event with its encodings, allocated together.
type publishedEvent struct {
	Event
	enc encodings
}

type encoded struct {
	f *Format
	b []byte
}

// Encode returns the event in format f. A published event encodes on the first call for
// f and hands the same bytes to every later one, so callers must not modify them. It is
// safe for concurrent use. A TransientSubscriber may use the bytes only as long as it
// says it holds them (HoldsEncodings): once it does not, the actor may encode its next
// event into the same memory.
func (e *Event) Encode(f *Format) []byte {
	c := e.enc
	if c == nil {
		return f.encode(e) // not published: nothing to share it with
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.f == f {
		return c.first.b
	}
	for _, x := range c.more {
		if x.f == f {
			return x.b
		}
	}
	var b []byte
	if c.spare != nil && f.appendTo != nil {
		b = f.appendTo(c.spare, e)
		c.spare = nil
	} else {
		b = f.encode(e)
	}
	if c.first.f == nil {
		c.first = encoded{f, b}
	} else {
		c.more = append(c.more, encoded{f, b})
	}
	return b
}

// encodedBytes is the size of the encodings the event has cached so far.
func (e *Event) encodedBytes() int {
	c := e.enc
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.first.b)
	for _, x := range c.more {
		n += len(x.b)
	}
	return n
}

// eventOverhead is what an event's size counts beyond its text: its ids, type and
// framing, about what protocol v1's JSON spends on them.
const eventOverhead = 160

// size estimates the event's own weight for the ring's byte bound: its variable payload
// (text, message content, tool input and output) plus a fixed overhead. Its encodings
// are counted apart (encodedBytes).
func (e *Event) size() int {
	n := eventOverhead + len(e.Text) + len(e.RequestID)
	if m := e.Message; m != nil {
		n += len(m.Content) + len(m.RequestID) + len(m.ProviderData)
		if t := m.Tool; t != nil {
			n += len(t.CallID) + len(t.Name) + len(t.Input)
			if t.Output != nil {
				n += len(*t.Output)
			}
		}
	}
	if r := e.Run; r != nil {
		n += len(r.RequestID) + len(r.Model)
		if r.Error != nil {
			n += len(r.Error.Message)
		}
		if p := r.PendingApproval; p != nil {
			n += len(p.Input) + len(p.Name)
		}
	}
	if e.Error != nil {
		n += len(e.Error.Message)
	}
	return n
}

// Snapshot is a session's state as of LastSeq: its newest messages (the open assistant
// segment with its text so far, running tool calls with their output so far) and the
// active run, if any.
type Snapshot struct {
	RequestID string // of the hello it answers, if any
	SessionID uuid.UUID
	Epoch     string
	LastSeq   int64
	Messages  []chat.Message
	HasMore   bool
	ActiveRun *chat.Run
	// LastRun is the session's latest run when it has ended (nil when it is active, or
	// there is none), so a client can offer to resume it (LastRun.Resumable).
	LastRun *chat.Run
	// ApprovalRules are the session's standing approvals, oldest first.
	ApprovalRules []chat.ApprovalRule
	// Queued are the messages waiting behind the active run, oldest first.
	Queued []chat.Queued
}

// Resumed announces a replay: the events after LastSeq (the subscriber's own) follow.
type Resumed struct {
	RequestID string // of the hello it answers, if any
	SessionID uuid.UUID
	Epoch     string
	LastSeq   int64
}

// CatchUp answers a hello: either a snapshot, or a replay (Resumed, then the events the
// subscriber missed, oldest first).
type CatchUp struct {
	Snapshot *Snapshot
	Resumed  *Resumed
	Events   []*Event
}

// DropReason says why the actor let go of a subscriber.
type DropReason int

const (
	// DropSlow: the subscriber's queue was full. It should reconnect and resume.
	DropSlow DropReason = iota + 1
	// DropShutdown: the server is stopping. Queued frames should still be sent.
	DropShutdown
	// DropDeleted: the session was deleted. Queued frames should still be sent; the
	// client must not reconnect to it.
	DropDeleted
	// DropMoved: another node holds the session now. Queued frames should still be
	// sent; the client should reconnect at once (and reaches the new holder).
	DropMoved
)

// Subscriber receives a session's events. The actor calls its methods from its own
// goroutine, so none may block. Events are shared by every subscriber and the replay
// ring: a subscriber encodes one with Event.Encode (once per Format, whoever asks first)
// and must not modify it.
type Subscriber interface {
	// CatchUp queues the answer to a hello. It is bounded by the actor (a replay by
	// MaxReplayBytes, a snapshot by SnapshotMessages), so it must not count against the
	// budget for live events: a large snapshot must not get the next live event refused.
	// It returns false only when the subscriber is closed.
	CatchUp(c CatchUp) bool
	// Deliver queues a live event. It returns false when the event does not fit (the
	// queue is full, or the subscriber is closed); the actor then drops the subscriber.
	Deliver(ev *Event) bool
	// Dropped tells the subscriber it will get no more frames from this actor.
	Dropped(reason DropReason)
}

// A TransientSubscriber keeps nothing of an event it is given (Deliver, Hold) but its
// encodings (Event.Encode) once the call returns, so the actor may reuse the event's
// memory for the next one; and it says whether it still holds encodings, so that the
// actor reuses their memory too when none does. A subscriber that is not one may keep
// events as long as it likes.
type TransientSubscriber interface {
	Subscriber
	// HoldsEncodings reports whether the subscriber still held encodings of events it
	// was given (queued, not yet written) when its last Deliver or Hold returned. The
	// actor asks right after each, and when the answer is false it may write its next
	// event's encoding into the memory of this one's: a subscriber must never read an
	// encoding it did not report holding.
	HoldsEncodings() bool
}

// A HoldingSubscriber can hold the live events the actor publishes while more of its
// work is queued behind them, and send them together once the actor has caught up: one
// write for several events, when the process is behind, instead of one each.
type HoldingSubscriber interface {
	Subscriber
	// Hold queues a live event as Deliver does, but need not send it before Release.
	Hold(ev *Event) bool
	// Release sends what Hold queued. The actor calls it once its inbox is empty.
	Release()
}
