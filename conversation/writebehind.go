package conversation

import (
	"errors"
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/journal"
)

// Write-behind. A run's rows after its start (a segment's insert and its final update, a
// tool call's, the run's status changes and end) are not waited for: the actor queues
// them in the session's write queue (package journal) and publishes the event at once,
// and the session's writer goroutine stores them in the order they were made. So no
// token waits for the database, and a slow database delays only what must be stored
// before it is told: the run and its user message (chat.started and the ack), and the
// steps of durability class BeforeAnnounce (awaitStored).
//
// What clients were told is what is stored: a write that may pass on a retry is kept
// and retried (the queue stops at it and goes on with it, in order), reads lay the
// queued writes over what the database holds, and an actor with queued writes is not
// idle; one that stops stores them first. What the database will never take ends the
// run it belongs to (onWrites).

// overlayMessages lays the queued message writes over msgs read from the database:
// rows replaced by their newest queued version, and queued inserts the database does not
// have yet added when in wants them. The result is in position order.
func overlayMessages(msgs []chat.Message, queued []journal.Write, in func(chat.Message) bool) []chat.Message {
	if len(queued) == 0 {
		return msgs
	}
	at := make(map[uuid.UUID]int, len(msgs))
	for i, m := range msgs {
		at[m.ID] = i
	}
	added := false
	for _, w := range queued {
		if w.Msg == nil {
			continue
		}
		if i, ok := at[w.Msg.ID]; ok {
			msgs[i] = keepBranch(*w.Msg, msgs[i])
			continue
		}
		if w.Insert && in(*w.Msg) {
			at[w.Msg.ID] = len(msgs)
			msgs = append(msgs, *w.Msg)
			added = true
		}
	}
	if added {
		slices.SortFunc(msgs, func(a, b chat.Message) int { return int(a.Position - b.Position) })
	}
	return msgs
}

// keepBranch returns m, a newer state of read, with read's Branch when m has none: the
// writer does not follow the siblings a message gets after it was made, the read does.
func keepBranch(m, read chat.Message) chat.Message {
	if m.Branch == nil {
		m.Branch = read.Branch
	}
	return m
}

// queuedRun returns the newest queued version of run id.
func queuedRun(queued []journal.Write, id uuid.UUID) (chat.Run, bool) {
	for i := len(queued) - 1; i >= 0; i-- {
		if r := queued[i].Run; r != nil && r.ID == id {
			return *r, true
		}
	}
	return chat.Run{}, false
}

// leafOver returns the active leaf once the queued inserts are stored: each one under
// the leaf stored, in order, grows the path.
func leafOver(stored *uuid.UUID, queued []journal.Write) *uuid.UUID {
	leaf := cloneID(stored)
	for _, w := range queued {
		if w.Insert && w.Msg != nil && sameID(w.Msg.ParentID, leaf) {
			leaf = &w.Msg.ID
		}
	}
	return leaf
}

// maxQueuedPosition is the highest position a queued insert takes (0 when none).
func maxQueuedPosition(queued []journal.Write) int64 {
	var p int64
	for _, w := range queued {
		if w.Insert && w.Msg.Position > p {
			p = w.Msg.Position
		}
	}
	return p
}

// onWrites handles what the session's writer reported.
//
//   - A write that failed in a way that may pass is kept and retried by the queue: the
//     run goes on, and a step that needs its writes stored waits for it (awaitStored).
//   - An insert the database refused leaves a position the actor may not have and a row
//     it does not: the next position is read again, and the run, if it streams, fails.
//   - A write the database will never take is given up: its run, if it streams, ends as
//     a storage error (its end is stored by a guarded update, and its clients are told),
//     so the session can go idle; an ended run's rows are settled, so none is left
//     streaming.
//   - A write whose row is gone ends the session as deleted elsewhere.
//   - A write refused by the fence stops the actor (the loop sees the queue fenced out).
func (a *Actor) onWrites() {
	j := a.journal
	for _, o := range j.q.Outcomes() {
		switch o.Failure {
		case journal.Transient, journal.Fenced:
			continue
		case journal.Gone:
			a.deletedElsewhere(o.Err)
			return
		case journal.Refused: // an insert
			j.loaded = false
			j.recent.forget() // clients were told of a row the database does not have
		case journal.Permanent:
			j.recent.forget()
		}
		if run := a.run; run != nil && o.Write.Of(run.info.ID) {
			op := "store the reply"
			if o.Write.Msg != nil && o.Write.Msg.Tool != nil {
				op = "store the tool call"
			}
			a.failStorage(run, op, o.Err)
		}
		if o.Failure == journal.Permanent {
			a.givenUp(o.Write) // after the run's end, if it just ended
		}
	}
}

// givenUp leaves nothing of an ended run unfinished after one of its writes was given
// up: a message's rows still streaming are settled as errors, and a run whose end was
// given up is ended again, as a storage error, with nothing but its status.
func (a *Actor) givenUp(w journal.Write) {
	if w.Fallback {
		return // itself in place of a write given up: nothing more to try
	}
	now := a.now()
	switch {
	case w.Msg != nil && w.Msg.RunID != nil:
		_ = a.journal.q.Add(journal.Write{Settle: &journal.Settle{RunID: *w.Msg.RunID, Status: chat.MessageError, Now: now}, Fallback: true})
	case w.Run != nil && w.Run.EndedAt != nil:
		r := chat.Run{
			ID: w.Run.ID, SessionID: w.Run.SessionID, RequestID: w.Run.RequestID, StartedAt: w.Run.StartedAt,
			Status: chat.RunError, EndedAt: &now, LastActivityAt: now, Model: w.Run.Model,
			Error: &chat.ErrorInfo{Code: CodeStorage, Message: "the database could not store how this run ended"},
		}
		_ = a.journal.q.Add(journal.Write{Run: &r, Fallback: true})
	}
}

var (
	errWriteRefused = errors.New("a write of the run was refused")
	errWriteWaits   = errors.New("a write of the run waits for a retry")
)

// awaitStored waits until run's queued writes are stored, for a step of durability class
// BeforeAnnounce that must not go on before the database has them (a tool call runs, a
// decision is heard, a status is told). A write that waits for a retry is retried at
// once. What the writer reported is heard now, not at the loop's next turn.
// errWriteRefused: a write was refused or given up (the lease's fence, a session
// deleted, a position taken, a value the database will never take), so the run ended
// (onWrites) or the actor is fenced out and stops. errWriteWaits: a write still waits
// for a retry (the database is unavailable), and the run ends as a storage error of op.
func (a *Actor) awaitStored(run *runState, op string) error {
	stored := a.journal.q.Await()
	a.onWrites()
	if a.journal.q.FencedOut() || !a.isCurrent(run) {
		return errWriteRefused
	}
	if !stored {
		a.failStorage(run, op, errWriteWaits)
		return errWriteWaits
	}
	return nil
}
