package conversation

import (
	"context"
	"slices"

	"github.com/chatd/chatd/chat"
)

// StatusQueued is the status a send's answer gives for a message it queued: it has no
// run yet.
const StatusQueued chat.RunStatus = "queued"

// Unqueue takes back the queued message sent with requestID before its run starts: every
// tab gets queue.updated without it. *Error CodeNotFound when no such message is queued
// (it was never queued, was taken back, or has started its run).
func (a *Actor) Unqueue(ctx context.Context, requestID string) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &unqueueIntent{requestID, r} })
	return err
}

type unqueueIntent struct {
	requestID string
	reply     chan result[struct{}]
}

// loadQueued reads the session's queued messages on first use.
func (a *Actor) loadQueued() error {
	if a.queuedLoaded {
		return nil
	}
	q, err := a.journal.queuedList()
	if err != nil {
		return err
	}
	a.queued, a.queuedLoaded = q, true
	return nil
}

// queuedAt is the index of the queued message with requestID, -1 when none is.
func (a *Actor) queuedAt(requestID string) int {
	return slices.IndexFunc(a.queued, func(q chat.Queued) bool { return q.RequestID == requestID })
}

// enqueue stores req as queued behind the active run and tells every tab.
func (a *Actor) enqueue(req SendRequest) (SendResult, error) {
	if len(a.queued) >= a.cfg.MaxQueued {
		return SendResult{}, errorf(CodeQueueFull, "%d messages are queued already (at most %d): wait for a run to end, or take one back", len(a.queued), a.cfg.MaxQueued)
	}
	m := chat.Queued{SessionID: a.id, RequestID: req.RequestID, Content: req.Content, CreatedAt: a.now()}
	if err := a.journal.insertQueued(m); err != nil {
		return SendResult{}, a.storageError("store the queued message", err)
	}
	a.queued = append(slices.Clip(a.queued), m)
	a.publishQueue()
	return SendResult{Duplicate: false, Status: StatusQueued}, nil
}

// unqueue takes a queued message back before its run starts.
func (a *Actor) unqueue(requestID string) error {
	if err := a.takeUpLoaded(); err != nil {
		return err
	}
	if err := a.loadQueued(); err != nil {
		return a.storageError("read the queued messages", err)
	}
	i := a.queuedAt(requestID)
	if i < 0 {
		return errorf(CodeNotFound, "no message with requestId %q is queued (it may have started its run)", requestID)
	}
	if err := a.journal.deleteQueued(requestID); err != nil {
		return a.storageError("delete the queued message", err)
	}
	a.queued = slices.Delete(slices.Clone(a.queued), i, i+1)
	a.publishQueue()
	return nil
}

// startQueued starts the oldest queued message's run once no run is active: after a run
// ended, and after a restart once the run it recovered ended. It runs after every intent.
func (a *Actor) startQueued() {
	if a.run != nil || a.session == nil || !a.journal.loaded {
		return
	}
	if !a.queuedLoaded {
		if err := a.loadQueued(); err != nil {
			return // read again after the next intent
		}
	}
	if len(a.queued) == 0 {
		return
	}
	next := a.queued[0]
	_, err := a.send(SendRequest{RequestID: next.RequestID, Content: next.Content, WhileRunning: chat.DoubleTextReject, fromQueue: true})
	if err != nil {
		// Another run is active (a suspended one taken up), or the database or the
		// user's limit refused it: it stays queued, and is tried after the next intent.
		a.logger().Debug().Err(err).Str("request_id", next.RequestID).Msg("queued message not started yet")
		return
	}
	if err := a.journal.deleteQueued(next.RequestID); err != nil {
		// Its run is stored under the same requestId: a row left behind is answered as
		// a duplicate when it comes up again.
		a.logger().Error().Err(err).Str("request_id", next.RequestID).Msg("delete a started queued message")
	}
	a.queued = slices.Delete(slices.Clone(a.queued), 0, 1)
	a.publishQueue()
}

func (a *Actor) publishQueue() {
	ev := Event{Type: EventQueue, Queued: slices.Clone(a.queued)}
	if ev.Queued == nil {
		ev.Queued = []chat.Queued{}
	}
	a.publish(ev)
}
