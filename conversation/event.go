package conversation

import (
	"github.com/google/uuid"

	"github.com/chatd/chatd/store"
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
	EventRunStatus      EventType = "run.status"
	EventChatDone       EventType = "chat.done"
	EventChatError      EventType = "chat.error"
	EventChatCancelled  EventType = "chat.cancelled"
)

// Event is one sequenced change to a session. Which fields are set depends on Type:
//
//	chat.started               Run, Message (the user message)
//	assistant.segment.started  Message
//	chat.delta                 MessageID, Text
//	assistant.segment.ended    MessageID, Status, Error (when the segment failed)
//	tool.start, tool.update, tool.end  Message
//	tool.output                MessageID, Text
//	run.status, chat.done, chat.error, chat.cancelled  Run
type Event struct {
	Seq       int64
	Type      EventType
	RunID     uuid.UUID
	RequestID string
	Run       *store.Run
	Message   *store.Message
	MessageID uuid.UUID
	Text      string
	Status    store.MessageStatus
	Error     *store.ErrorInfo
}

// Snapshot is a session's state as of LastSeq: its newest messages (the open assistant
// segment with its text so far, running tool calls with their output so far) and the
// active run, if any.
type Snapshot struct {
	RequestID string // of the hello it answers, if any
	SessionID uuid.UUID
	Epoch     string
	LastSeq   int64
	Messages  []store.Message
	HasMore   bool
	ActiveRun *store.Run
}

// Resumed announces a replay: the events after LastSeq (the subscriber's own) follow.
type Resumed struct {
	RequestID string // of the hello it answers, if any
	SessionID uuid.UUID
	Epoch     string
	LastSeq   int64
}

// Encoder turns events and catch-up messages into frames. The actor encodes each event
// once and hands the same bytes to every subscriber and to the replay ring, so frames
// must not be modified after they are returned.
type Encoder interface {
	Event(Event) ([]byte, error)
	Snapshot(Snapshot) ([]byte, error)
	Resumed(Resumed) ([]byte, error)
}

// DropReason says why the actor let go of a subscriber.
type DropReason int

const (
	// DropSlow: the subscriber's queue was full. It should reconnect and resume.
	DropSlow DropReason = iota + 1
	// DropShutdown: the server is stopping. Queued frames should still be sent.
	DropShutdown
)

// Subscriber receives a session's frames. The actor calls its methods from its own
// goroutine, so none may block.
type Subscriber interface {
	// CatchUp queues the frames that answer a hello (resumed and the replayed events, or
	// a snapshot). They are bounded by the actor (a replay by MaxReplayBytes, a snapshot
	// by SnapshotMessages), so they must not count against the budget for live events:
	// a large snapshot must not get the next live event refused. It returns false only
	// when the subscriber is closed.
	CatchUp(frames [][]byte) bool
	// Deliver queues a live event's frame. It returns false when the frame does not fit
	// (the queue is full, or the subscriber is closed); the actor then drops it.
	Deliver(frame []byte) bool
	// Dropped tells the subscriber it will get no more frames from this actor.
	Dropped(reason DropReason)
}
