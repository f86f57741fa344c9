package journal

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// Class is the durability a write needs: by when it must be stored, relative to what
// its session does next.
type Class uint8

const (
	// Behind: stored behind the stream, in order; nothing waits for it. A segment's row
	// and its final text, a tool call's result, a run's end.
	Behind Class = iota
	// BeforeAnnounce: the step that made it waits until it is stored before it goes on
	// (the event that announces it, the tool that runs after it). A decision, a run's
	// change of status, a tool call's row before the tool runs. See Queue.Await.
	BeforeAnnounce
	// BeforeAck: a statement its caller makes at once, after the writes queued before
	// it, and waits for before it answers (Queue.Do). The user message and its run.
	BeforeAck
)

// Store is what a queue needs of the database: the writes an actor makes after a run
// has started. *store.Store implements it.
type Store interface {
	MessageInsert(ctx context.Context, m chat.Message) error
	MessageUpdate(ctx context.Context, m chat.Message, from ...chat.MessageStatus) error
	RunUpdate(ctx context.Context, run chat.Run, from ...chat.RunStatus) error
	MessagesSettleRun(ctx context.Context, runID uuid.UUID, status chat.MessageStatus, now time.Time, except ...uuid.UUID) (int64, error)
}

var _ Store = (*store.Store)(nil)

// Write is one write of a session: a message's insert, the newest state of a message or
// of a run (guarded: a message is updated only while it streams, a run only while it is
// active), or the settling of a run's stray rows.
type Write struct {
	Msg    *chat.Message
	Insert bool // Msg is new: inserted, not updated
	Run    *chat.Run
	Settle *Settle
	// Ends, when set, is the stream whose text Msg stores for good: its log is removed
	// once the write is stored, or refused.
	Ends *Stream
	// Fallback marks a write made in place of one the database will never take (a
	// settle of the rows it left streaming, a run's bare end): if it fails for good
	// too, nothing else is tried.
	Fallback bool

	// Set by the queue.
	fence    int64
	n        uint64
	retried  bool // tried before: an insert that then meets its own row committed it
	queuedAt time.Time
}

// Settle ends the rows of a run still streaming that the actor may not track (an insert
// whose answer was lost) with Status; rows whose own writes are queued behind it are
// left to those.
type Settle struct {
	RunID  uuid.UUID
	Status chat.MessageStatus
	Now    time.Time
}

// Table names what the write is about, for logs and metrics: messages, runs or settle.
func (w Write) Table() string {
	switch {
	case w.Msg != nil:
		return "messages"
	case w.Run != nil:
		return "runs"
	}
	return "settle"
}

// ID is the row the write is about (the run, for a settle).
func (w Write) ID() uuid.UUID {
	switch {
	case w.Msg != nil:
		return w.Msg.ID
	case w.Run != nil:
		return w.Run.ID
	}
	return w.Settle.RunID
}

// Of reports whether w is a write of run runID.
func (w Write) Of(runID uuid.UUID) bool {
	switch {
	case w.Msg != nil:
		return w.Msg.RunID != nil && *w.Msg.RunID == runID
	case w.Run != nil:
		return w.Run.ID == runID
	}
	return w.Settle.RunID == runID
}

// Fence is the lease token the write was queued under (0: none).
func (w Write) Fence() int64 { return w.fence }

// statement names the store call a write makes, for logs.
func (w Write) statement() string {
	switch {
	case w.Msg != nil && w.Insert:
		return "MessageInsert"
	case w.Msg != nil:
		return "MessageUpdate"
	case w.Run != nil:
		return "RunUpdate"
	}
	return "MessagesSettleRun"
}

// exec makes one write under its fence. keep names the messages whose own writes are
// queued behind it, which a settle leaves alone.
func exec(ctx context.Context, st Store, w Write, keep []uuid.UUID) error {
	ctx = withFence(ctx, w.fence)
	switch {
	case w.Msg != nil && w.Insert:
		err := st.MessageInsert(ctx, *w.Msg)
		if w.retried && errors.Is(err, store.ErrConflict) && store.Constraint(err) == "messages_pkey" {
			return nil // its own row: the earlier try committed before its answer was lost
		}
		return err
	case w.Msg != nil:
		return st.MessageUpdate(ctx, *w.Msg, chat.MessageStreaming)
	case w.Run != nil:
		return st.RunUpdate(ctx, *w.Run, chat.ActiveRunStatuses()...)
	}
	// Messages whose final state is still to be stored are not settled: their own
	// update would then be refused, and what clients were told would be lost.
	_, err := st.MessagesSettleRun(ctx, w.Settle.RunID, w.Settle.Status, w.Settle.Now, keep...)
	return err
}

// withFence returns ctx for writes fenced by token (none for 0).
func withFence(ctx context.Context, token int64) context.Context {
	if token == 0 {
		return ctx
	}
	return store.WithFence(ctx, token)
}
