package conversation

import (
	"context"
	"errors"

	"github.com/chatd/chatd/chat"
	"github.com/google/uuid"
)

// HelloRequest subscribes Subscriber to the session.
type HelloRequest struct {
	// Owner is the authenticated user; the session is created for them when new.
	Owner string
	// Create lets the hello create the session when it does not exist. Without it a
	// missing session is ErrNoSession: a client must not choose the id of a new session
	// (it could squat on ids others will use), so transports set it only for ids the
	// server generated.
	Create bool
	// Epoch and LastSeq are where the subscriber's state is, if it has any; a matching
	// epoch with a gap still in the ring is answered with a replay.
	Epoch   string
	LastSeq int64
	// Subscriber receives the catch-up frames and then every live event.
	Subscriber Subscriber
	// Format is the format Subscriber encodes events in, if it has one: a replay is
	// measured against Config.MaxReplayBytes in its bytes. Without it the events' size
	// estimate (Event.size) is used.
	Format *Format
	// RequestID, when the hello carried one, is echoed on the catch-up frame.
	RequestID string
}

// HelloResult says how a subscriber was caught up.
type HelloResult struct {
	Epoch string
	// Resumed is true for a replay from the ring, false for a snapshot.
	Resumed bool
	// LastSeq is the seq the subscriber is at once its catch-up frames are applied.
	LastSeq int64
	// Replayed counts the events a replay sent.
	Replayed int
}

// Hello registers req.Subscriber and queues its catch-up frames (resumed + the missing
// events, or a snapshot) in one actor step, so it misses no event and gets none twice.
// It creates the session when it does not exist and req.Create is set (ErrNoSession
// otherwise), and returns ErrNotYours when it belongs to someone else, *Error with CodeStorage when the database fails, or ErrStopped.
func (a *Actor) Hello(ctx context.Context, req HelloRequest) (HelloResult, error) {
	// Numbered as it is sent: an unsubscribe of the same subscriber taken after this
	// number came after this hello, and undoes it (takeUnsubscribes).
	n := a.hellos.Add(1)
	return call(ctx, a, func(r chan result[HelloResult]) intent { return &helloIntent{req, n, r} })
}

// SendRequest starts a run with a user message.
type SendRequest struct {
	RequestID string
	Content   string
	// WhileRunning is what the message does when a run is active: "" for the actor's
	// Config.DoubleText.
	WhileRunning chat.DoubleText
	// EditOf names a user message of the session (any, on any branch) that this one
	// edits: it becomes that message's sibling, and its branch the active path. While a
	// run is active an edit is CodeRunActive unless WhileRunning is interrupt.
	EditOf *uuid.UUID
	// Token is the sender's bearer token, for the tools and agents configured to pass
	// it on (docs/tools.md, docs/agents.md). It is kept in memory only, with the run (or
	// the queued message): never stored, so a run continued by another process has none.
	Token string

	// fromQueue: the actor starts a queued message's run (queue.go).
	fromQueue bool
}

// SendResult describes the run a send started, or found when it repeated a requestId.
type SendResult struct {
	RunID     uuid.UUID
	Duplicate bool
	Status    chat.RunStatus
}

// Send starts a run for the user message, stored before chat.started is published. A
// requestId the session has seen returns that run with Duplicate set and stores nothing.
// Errors are *Error: CodeBadRequest or CodeTooLarge for bad input, CodeRunActive when
// another run is active, CodeStorage when the database fails.
func (a *Actor) Send(ctx context.Context, req SendRequest) (SendResult, error) {
	return call(ctx, a, func(r chan result[SendResult]) intent { return &sendIntent{req, r} })
}

// CancelResult names the run a cancel ended.
type CancelResult struct {
	RunID  uuid.UUID
	Status chat.RunStatus
}

// Cancel ends the active run as cancelled, or only run runID when it is not uuid.Nil. The
// open segment keeps its text with status cancelled. It returns *Error with CodeNoRun
// when there is no such active run.
func (a *Actor) Cancel(ctx context.Context, runID uuid.UUID) (CancelResult, error) {
	return call(ctx, a, func(r chan result[CancelResult]) intent { return &cancelIntent{runID, r} })
}

// HistoryPage is a page of older messages.
type HistoryPage struct {
	Messages []chat.Message // ascending position
	HasMore  bool
}

// History returns up to limit messages before position before (0 for the newest),
// including live text of a segment that is still streaming. It returns *Error with
// CodeBadRequest for a limit outside 1..MaxHistoryLimit.
func (a *Actor) History(ctx context.Context, before int64, limit int) (HistoryPage, error) {
	return call(ctx, a, func(r chan result[HistoryPage]) intent { return &historyIntent{before, limit, r} })
}

// Unsubscribe removes sub; it is a no-op when sub is not subscribed or the actor stopped.
// It never waits for the actor and is never lost: a busy actor (a full inbox, a slow
// statement) takes it at its next step, and a hello of sub still on its way after it
// subscribes nothing. ctx is not needed; it stays for the callers' symmetry.
func (a *Actor) Unsubscribe(_ context.Context, sub Subscriber) {
	a.unsubs.mu.Lock()
	a.unsubs.subs = append(a.unsubs.subs, leaving{sub, a.hellos.Load()})
	a.unsubs.mu.Unlock()
	select {
	case a.unsubs.signal <- struct{}{}:
	default:
	}
	a.poke()
}

// Stop ends the actor for a server shutdown: the active run is suspended for the next
// process (Config.SuspendOnStop: its open segment stored, interrupted) or ended
// interrupted, subscribers are dropped with DropShutdown, and the actor stops taking
// intents. What it queued is stored before it stops, writes that fail retried until ctx
// ends (each one it could not store is logged). Use Wait to wait for the run goroutine.
func (a *Actor) Stop(ctx context.Context) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &stopIntent{ctx, r} })
	if errors.Is(err, ErrStopped) {
		return nil
	}
	return err
}

// Flush waits until the writes the actor has made so far are stored: writes are stored
// behind the events (write-behind), so a reader of the database that must see what
// clients were told (a transcript read right after a run ended, a test) flushes the
// session's actor first. It returns a CodeStorage *Error when a write failed and waits
// for its retry, and nil for a stopped actor (it stored its writes when it stopped).
func (a *Actor) Flush(ctx context.Context) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &flushIntent{r} })
	if errors.Is(err, ErrStopped) {
		return nil
	}
	return err
}

// Delete ends the actor of a session that is being deleted: the active run is cancelled
// (its end stored and published), every subscriber is let go with DropDeleted, and the
// actor stops taking intents; Wait then waits for the run goroutine. It writes nothing
// else: deleting the rows is the caller's part (store.SessionDelete), after Wait, so no
// run goroutine can write behind it. A stopped actor returns nil.
func (a *Actor) Delete(ctx context.Context) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &deleteIntent{r} })
	if errors.Is(err, ErrStopped) {
		return nil
	}
	return err
}

type intent any

type result[T any] struct {
	val T
	err error
}

type (
	helloIntent struct {
		req   HelloRequest
		n     uint64 // see Actor.hellos
		reply chan result[HelloResult]
	}
	sendIntent struct {
		req   SendRequest
		reply chan result[SendResult]
	}
	cancelIntent struct {
		runID uuid.UUID
		reply chan result[CancelResult]
	}
	historyIntent struct {
		before int64
		limit  int
		reply  chan result[HistoryPage]
	}
	stopIntent struct {
		ctx   context.Context // bounds what it stores as it stops
		reply chan result[struct{}]
	}
	deleteIntent struct{ reply chan result[struct{}] }
	flushIntent  struct{ reply chan result[struct{}] }
)

// call sends an intent built around a reply channel and waits for the answer. The reply
// channel has room for the answer, so the actor never blocks on a caller that gave up.
func call[T any](ctx context.Context, a *Actor, build func(chan result[T]) intent) (T, error) {
	var zero T
	reply := make(chan result[T], 1)
	a.pending.Add(1)
	select {
	case a.inbox <- build(reply):
		a.poke()
	case <-a.done:
		a.pending.Add(-1)
		return zero, ErrStopped
	case <-ctx.Done():
		a.pending.Add(-1)
		return zero, ctx.Err()
	}
	select {
	case r := <-reply:
		return r.val, r.err
	case <-a.done:
		// The actor answers before it stops, so an answer may be waiting.
		select {
		case r := <-reply:
			return r.val, r.err
		default:
			return zero, ErrStopped
		}
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}
