package conversation

import (
	"context"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
)

// StatusQueued is the status a send's answer gives for a message it queued: it has no
// run yet.
const StatusQueued chat.RunStatus = "queued"

// StatusSteering is the status of a steering message waiting for the run's next step
// boundary; StatusSteered of one the run has taken (a repeat's answer, with the run).
const (
	StatusSteering chat.RunStatus = "steering"
	StatusSteered  chat.RunStatus = "steered"
)

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
func (a *Actor) enqueue(req SendRequest, steer bool) (SendResult, error) {
	if len(a.queued) >= a.cfg.MaxQueued {
		return SendResult{}, errorf(CodeQueueFull, "%d messages are queued already (at most %d): wait for a run to end, or take one back", len(a.queued), a.cfg.MaxQueued)
	}
	m := chat.Queued{SessionID: a.id, RequestID: req.RequestID, Content: req.Content, CreatedAt: a.now(), Steering: steer}
	if err := a.journal.insertQueued(m); err != nil {
		return SendResult{}, a.storageError("store the queued message", err)
	}
	a.queued = append(slices.Clip(a.queued), m)
	if req.Token != "" {
		if a.queuedTokens == nil {
			a.queuedTokens = map[string]string{}
		}
		a.queuedTokens[req.RequestID] = req.Token
	}
	a.publishQueue()
	if steer {
		return SendResult{RunID: a.run.info.ID, Status: StatusSteering}, nil
	}
	return SendResult{Status: StatusQueued}, nil
}

// onSteer hands the run's agent the steering messages sent since its last step
// boundary: each becomes a user message of the run (message.added), and leaves the queue.
func (a *Actor) onSteer(run *runState) ([]string, error) {
	if !a.isCurrent(run) {
		return nil, ErrRunEnded
	}
	var texts []string
	rest := make([]chat.Queued, 0, len(a.queued))
	for i, q := range a.queued {
		if !q.Steering {
			rest = append(rest, q)
			continue
		}
		// On a failed write the run ends; what it took so far is no longer queued.
		fail := func(op string, err error) ([]string, error) {
			a.queued = append(rest, a.queued[i:]...)
			a.publishQueue()
			a.failStorage(run, op, err)
			return nil, ErrRunEnded
		}
		if len(texts) == 0 {
			if err := a.closeSegment(run, chat.MessageComplete, nil); err != nil {
				return fail("store the reply", err)
			}
		}
		m := a.newRunMessage(run, chat.RoleUser, chat.MessageComplete)
		m.Content = q.Content
		if err := a.journal.insert(m); err != nil {
			return fail("store a steering message", err)
		}
		if err := a.journal.deleteQueued(q.RequestID); err != nil {
			a.logger().Error().Err(err).Str("request_id", q.RequestID).Msg("delete a steering message taken by its run")
		}
		if a.steered == nil {
			a.steered = make(map[string]uuid.UUID)
		}
		a.steered[q.RequestID] = run.info.ID
		a.publish(a.runEvent(run, Event{Type: EventMessageAdded, Message: &m}))
		texts = append(texts, q.Content)
	}
	if len(texts) > 0 {
		a.queued = rest
		a.publishQueue()
	}
	return texts, nil
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
	delete(a.queuedTokens, requestID)
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
	a.requeueSteering()
	next := a.queued[0]
	token := a.queuedTokens[next.RequestID]
	delete(a.queuedTokens, next.RequestID)
	_, err := a.send(SendRequest{RequestID: next.RequestID, Content: next.Content, WhileRunning: chat.DoubleTextReject, Token: token, fromQueue: true})
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

// requeueSteering queues the steering messages: the run they were sent to ended before a
// step boundary. It is called as a run ends, before another can start (an interrupt
// starts one in the same step), so that none takes them.
func (a *Actor) requeueSteering() {
	if !slices.ContainsFunc(a.queued, func(q chat.Queued) bool { return q.Steering }) {
		return
	}
	a.queued = slices.Clone(a.queued)
	for i := range a.queued {
		a.queued[i].Steering = false
	}
	a.publishQueue()
}

func (a *Actor) publishQueue() {
	ev := Event{Type: EventQueue, Queued: slices.Clone(a.queued)}
	if ev.Queued == nil {
		ev.Queued = []chat.Queued{}
	}
	a.publish(ev)
}
