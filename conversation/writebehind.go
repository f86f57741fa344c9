package conversation

import (
	"errors"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// Write-behind. A run's rows after its start (a segment's insert and its final update, a
// tool call's, the run's status changes and end) are not waited for: the actor queues
// them in the session's write queue and publishes the event at once, and the session's
// writer goroutine stores them in the order they were made. So no token waits for the
// database, and a slow database delays only what must be stored before it is told: the
// run and its user message (chat.started and the ack), which the actor still stores
// itself, after the writes queued before them.
//
// The statements are the same as before, one per write, and so are the promises: what
// clients were told is what is stored, a failed write is kept and retried (the queue
// stops at it and goes on with it, in order), a refused one is dropped, and reads lay
// the queued writes over what the database holds. An actor with queued writes is not
// idle, and one that stops stores them first.
//
// The writer goroutine runs only while the queue holds writes, so an idle session has
// none. It touches nothing the actor owns: what the actor must act on (a write that
// failed while its run streams, an insert refused) it leaves in the queue's outcomes and
// signals.

// writeQueue is shared by the actor and its writer goroutine; mu guards it.
type writeQueue struct {
	mu    sync.Mutex
	items []pendingWrite // oldest first; items[0] is in flight while inFlight
	next  uint64         // numbers the writes, so the writer pops the one it wrote
	// busy: a writer goroutine runs; done is closed when it has returned.
	busy     bool
	done     chan struct{}
	inFlight bool
	// halted: items[0] failed, and the queue waits for the actor's retry.
	halted   bool
	outcomes []writeOutcome
}

// writeOutcome is a write the actor must hear about: one that failed (kept, to be
// retried) or an insert the database refused.
type writeOutcome struct {
	w       pendingWrite
	err     error
	refused bool
}

// enqueue queues w behind the session's other writes and wakes the writer. Every write
// made is a statement, as when they were made in place: a row's versions are stored in
// turn, not merged.
func (j *journal) enqueue(w pendingWrite) error {
	if j.fencedOut.Load() {
		return errFencedOut
	}
	q := &j.q
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next++
	w.n = q.next
	q.items = append(q.items, w)
	j.startWriterLocked()
	return nil
}

// startWriterLocked starts the writer goroutine unless it runs or the queue waits for a
// retry. q.mu is held.
func (j *journal) startWriterLocked() {
	q := &j.q
	if q.busy || q.halted || len(q.items) == 0 {
		return
	}
	q.busy = true
	q.done = make(chan struct{})
	go j.writeLoop(q.done)
}

// writeLoop stores the queued writes in order until the queue is empty or one fails.
func (j *journal) writeLoop(done chan struct{}) {
	q := &j.q
	defer close(done)
	for {
		q.mu.Lock()
		if len(q.items) == 0 || q.halted {
			q.busy = false
			q.mu.Unlock()
			j.notify()
			return
		}
		w := q.items[0]
		q.inFlight = true
		var keep []uuid.UUID
		if w.settle != nil {
			for _, it := range q.items[1:] {
				if it.msg != nil {
					keep = append(keep, it.msg.ID)
				}
			}
		}
		q.mu.Unlock()

		err := j.exec(w, keep)
		refused := err != nil && j.refused(w, err)

		q.mu.Lock()
		q.inFlight = false
		head := len(q.items) > 0 && q.items[0].n == w.n
		switch {
		case err != nil && !refused:
			if head {
				q.items[0].retried = true
			}
			q.halted = true
			q.outcomes = append(q.outcomes, writeOutcome{w: w, err: err})
		default:
			if head {
				// The stored write is let go (an idle session keeps none of its text).
				q.items[0] = pendingWrite{}
				q.items = q.items[1:]
				if len(q.items) == 0 {
					q.items = nil
				}
			}
			if refused && w.insert {
				q.outcomes = append(q.outcomes, writeOutcome{w: w, err: err, refused: true})
			}
		}
		q.mu.Unlock()
		if err != nil {
			j.notify()
		}
	}
}

// notify tells the actor the writer has news (an outcome, or an empty queue).
func (j *journal) notify() {
	select {
	case j.signal <- struct{}{}:
	default:
	}
}

// takeOutcomes returns what the writer left for the actor since it last looked.
func (j *journal) takeOutcomes() []writeOutcome {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	o := j.q.outcomes
	j.q.outcomes = nil
	return o
}

// pending reports whether writes are queued (being stored, or waiting for a retry).
func (j *journal) pending() bool {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	return len(j.q.items) > 0
}

// halted reports whether the queue waits for a retry of a write that failed.
func (j *journal) halted() bool {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	return j.q.halted
}

// flush retries the queued writes, oldest first, in the background: the actor's retry
// timer calls it. A failure stops the queue again and schedules the next try.
func (j *journal) flush() {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	j.q.halted = false
	j.startWriterLocked()
}

// drain waits until the writer has tried every queued write: the queue is empty, or
// stopped at a write that failed (then it is kept for its retry, as a failed write
// always was). Statements the actor makes itself wait for it, so they come after what
// was queued before them.
func (j *journal) drain() {
	j.q.mu.Lock()
	done, busy := j.q.done, j.q.busy
	j.q.mu.Unlock()
	if busy {
		<-done
	}
}

// halt stops the writer after the write in flight and waits for it: the actor stops.
func (j *journal) halt() {
	j.q.mu.Lock()
	j.q.halted = true
	j.q.mu.Unlock()
	j.drain()
}

// discard forgets the queued writes: their session was deleted, or another node holds
// it. A write in flight ends on its own.
func (j *journal) discard() {
	j.q.mu.Lock()
	j.q.items = nil
	j.q.outcomes = nil
	j.q.mu.Unlock()
	j.retryDelay = 0
	j.recent.forget()
}

// queued returns a copy of the queued writes, oldest first: what reads lay over the
// database. Take it before reading: a write the writer stores meanwhile is then either
// in what the database answers or in the copy.
func (j *journal) queued() []pendingWrite {
	j.q.mu.Lock()
	defer j.q.mu.Unlock()
	if len(j.q.items) == 0 {
		return nil
	}
	return slices.Clone(j.q.items)
}

// overlayMessages lays the queued message writes over msgs read from the database:
// rows replaced by their newest queued version, and queued inserts the database does not
// have yet added when in wants them. The result is in position order.
func overlayMessages(msgs []chat.Message, queued []pendingWrite, in func(chat.Message) bool) []chat.Message {
	if len(queued) == 0 {
		return msgs
	}
	at := make(map[uuid.UUID]int, len(msgs))
	for i, m := range msgs {
		at[m.ID] = i
	}
	added := false
	for _, w := range queued {
		if w.msg == nil {
			continue
		}
		if i, ok := at[w.msg.ID]; ok {
			msgs[i] = *w.msg
			continue
		}
		if w.insert && in(*w.msg) {
			at[w.msg.ID] = len(msgs)
			msgs = append(msgs, *w.msg)
			added = true
		}
	}
	if added {
		slices.SortFunc(msgs, func(a, b chat.Message) int { return int(a.Position - b.Position) })
	}
	return msgs
}

// queuedRun returns the newest queued version of run id.
func queuedRun(queued []pendingWrite, id uuid.UUID) (chat.Run, bool) {
	for i := len(queued) - 1; i >= 0; i-- {
		if r := queued[i].run; r != nil && r.ID == id {
			return *r, true
		}
	}
	return chat.Run{}, false
}

// maxQueuedPosition is the highest position a queued insert takes (0 when none).
func maxQueuedPosition(queued []pendingWrite) int64 {
	var p int64
	for _, w := range queued {
		if w.insert && w.msg.Position > p {
			p = w.msg.Position
		}
	}
	return p
}

// onWrites handles what the session's writer reported. A write that failed is kept and
// retried (the retry timer); while its run streams, the run ends as a storage error: a
// run whose transcript cannot be stored must not go on as if it were. An insert the
// database refused leaves a position the actor may not have and a row it does not: the
// next position is read again, and the run, if it streams, fails too.
func (a *Actor) onWrites() {
	j := a.journal
	for _, o := range j.takeOutcomes() {
		if o.refused {
			j.loaded = false
			j.recent.forget() // clients were told of a row the database does not have
		} else {
			j.scheduleRetry()
		}
		if errors.Is(o.err, store.ErrFenced) {
			continue // the loop stops the actor
		}
		if run := a.run; run != nil && o.w.of(run.info.ID) {
			op := "store the reply"
			if o.w.msg != nil && o.w.msg.Tool != nil {
				op = "store the tool call"
			}
			a.failStorage(run, op, o.err)
		}
	}
	if !j.halted() && !j.pending() {
		j.retryDelay = 0
	}
}

// of reports whether w is a write of run runID.
func (w pendingWrite) of(runID uuid.UUID) bool {
	switch {
	case w.msg != nil:
		return w.msg.RunID != nil && *w.msg.RunID == runID
	case w.run != nil:
		return w.run.ID == runID
	}
	return w.settle.runID == runID
}

var (
	errWriteRefused = errors.New("a write of the run was refused")
	errWriteWaits   = errors.New("a write of the run waits for a retry")
)

// awaitStored waits until run's queued writes are stored, for a step that must not go on
// before the database has them (a tool call runs, a decision is heard). What the writer
// reported is heard now, not at the loop's next turn. errWriteRefused: a write was
// refused (the lease's fence, a session deleted, a position taken), so the run ended
// (onWrites) or the actor is fenced out and stops. errWriteWaits: a write waits for a
// retry, and the run ends as a storage error of op.
func (a *Actor) awaitStored(run *runState, op string) error {
	a.journal.drain()
	a.onWrites()
	if a.journal.fencedOut.Load() || !a.isCurrent(run) {
		return errWriteRefused
	}
	if a.journal.halted() {
		a.failStorage(run, op, errWriteWaits)
		return errWriteWaits
	}
	return nil
}
