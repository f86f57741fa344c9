package journal

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/store"
)

// A write that failed and may pass is retried after retryMin, doubling up to retryMax,
// unless a write of the node succeeds first (the database is back: every halted queue
// is retried at once) or a step needs it (Await).
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// closeRetry paces the retries of a queue that is closing (its actor stops): the
// shutdown's budget is short, so they come often.
const closeRetry = 250 * time.Millisecond

// ErrWaits is what a step that needs the writes before it stored gets when one of them
// failed and waits for a retry: the database is unavailable.
var ErrWaits = errors.New("journal: a write waits for a retry: the database is unavailable")

// Queue is one session's writes, stored in the order they were made by a writer
// goroutine that runs only while the queue holds writes. Its methods are for the
// session's actor, except Flush (any goroutine) and the Signal channel, which tells the
// actor that Outcomes has news.
type Queue struct {
	w       *Writer
	st      Store
	session uuid.UUID
	leased  bool
	log     func() *zerolog.Logger

	fence     atomic.Int64
	fencedOut atomic.Bool
	signal    chan struct{}
	onSignal  func() // QueueConfig.Notify

	mu sync.Mutex
	// items are the queued writes, oldest first; items[0] is in flight while inFlight.
	items    []Write
	next     uint64 // numbers the writes, so the writer pops the one it wrote
	busy     bool   // a writer goroutine runs; done is closed when it has returned
	done     chan struct{}
	inFlight bool
	// halted: items[0] failed and may pass; the queue waits for its retry.
	halted     bool
	retryDelay time.Duration
	retry      clockwork.Timer
	// extra: the try under way is one a step asked for (Await), out of the backoff's
	// schedule: when it fails, the backoff goes on as it was.
	extra bool
	// base is the context of the writes: Background, or the close's budget.
	base     context.Context
	closing  bool
	outcomes []Outcome
}

// QueueConfig is a session's queue.
type QueueConfig struct {
	Session uuid.UUID
	Store   Store
	// Leased: the session is held under a lease, and every write must carry its fence
	// (SetFence); one without is refused (ErrNoFence).
	Leased bool
	// Log returns the session's logger (built on first use).
	Log func() *zerolog.Logger
	// Notify, when set, is called after each signal is sent (Signal), from the
	// goroutine that sent it: a receiver that does not always wait on Signal learns
	// there that it has something to take.
	Notify func()
}

// Open returns the write queue of a session.
func (w *Writer) Open(cfg QueueConfig) *Queue {
	q := &Queue{w: w, st: cfg.Store, session: cfg.Session, leased: cfg.Leased, log: cfg.Log, signal: make(chan struct{}, 1), onSignal: cfg.Notify, base: context.Background()}
	if q.log == nil {
		l := w.cfg.Logger.With().Str("session_id", cfg.Session.String()).Logger()
		q.log = func() *zerolog.Logger { return &l }
	}
	return q
}

// SetFence makes token the fence of the writes queued from now on (0: none). Safe from
// any goroutine.
func (q *Queue) SetFence(token int64) { q.fence.Store(token) }

// Fence returns the fence writes are queued under now.
func (q *Queue) Fence() int64 { return q.fence.Load() }

// FencedOut reports whether a write was refused for its fence: another node holds the
// session, and nothing more of this queue reaches the database. Safe from any goroutine.
func (q *Queue) FencedOut() bool { return q.fencedOut.Load() }

// Signal receives when Outcomes has news, or the writer went idle.
func (q *Queue) Signal() <-chan struct{} { return q.signal }

// Add queues w behind the session's other writes, under the current fence, and wakes
// the writer. Every write is a statement of its own, as when writes were made in place:
// a row's versions are stored in turn, not merged. It fails at once, queuing nothing,
// once the queue is fenced out (ErrFencedOut) and for a leased session without a fence
// (ErrNoFence).
func (q *Queue) Add(w Write) error {
	if q.fencedOut.Load() {
		return ErrFencedOut
	}
	w.fence = q.fence.Load()
	if q.leased && w.fence == 0 {
		q.log().Error().Str("table", w.Table()).Str("id", w.ID().String()).Msg("a write without a fence was refused")
		return ErrNoFence
	}
	w.queuedAt = q.w.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.next++
	w.n = q.next
	if len(q.items) == 0 {
		q.w.metrics.queued(q, true)
	}
	q.w.metrics.depth.Add(1)
	q.items = append(q.items, w)
	q.startLocked()
	return nil
}

// startLocked starts the writer goroutine unless it runs or the queue waits for a retry.
// q.mu is held.
func (q *Queue) startLocked() {
	if q.busy || q.halted || len(q.items) == 0 {
		return
	}
	q.busy = true
	q.done = make(chan struct{})
	go q.writeLoop(q.done)
}

// writeLoop stores the queued writes in order until the queue is empty or one fails in a
// way that may pass.
func (q *Queue) writeLoop(done chan struct{}) {
	defer close(done)
	for {
		q.mu.Lock()
		if len(q.items) == 0 || q.halted {
			q.busy = false
			q.done = nil // not kept by an idle queue: the next writer makes its own
			q.mu.Unlock()
			q.notify()
			return
		}
		w := q.items[0]
		q.inFlight = true
		var keep []uuid.UUID
		if w.Settle != nil {
			for _, it := range q.items[1:] {
				if it.Msg != nil {
					keep = append(keep, it.Msg.ID)
				}
			}
		}
		ctx, cancel := context.WithTimeout(q.base, q.w.cfg.StatementTimeout)
		q.mu.Unlock()

		err := exec(ctx, q.st, w, keep)
		cancel()
		var failure Failure
		if err != nil {
			failure = Classify(err)
			if failure == Refused && w.Run != nil && errors.Is(err, store.ErrNotFound) {
				failure = Gone // a run's row goes only with its session
			}
			q.w.failed(q, w, failure, err)
		}

		q.mu.Lock()
		q.inFlight = false
		head := len(q.items) > 0 && q.items[0].n == w.n
		switch failure {
		case Transient:
			if head {
				q.items[0].retried = true
			}
			q.haltLocked()
			q.scheduleRetryLocked()
		case Fenced:
			q.fencedOut.Store(true)
			q.haltLocked()
		default:
			if head {
				q.popLocked()
			}
			if failure == 0 {
				q.retryDelay = 0
			}
		}
		if failure != 0 && (failure != Refused || w.Insert) {
			q.outcomes = append(q.outcomes, Outcome{Write: w, Err: err, Failure: failure})
		}
		q.mu.Unlock()

		if failure == 0 || failure == Refused {
			w.Ends.Stored() // the final text is stored (or the row moved on): its log goes
		}
		if failure == 0 {
			q.w.succeeded()
		} else {
			q.notify()
		}
	}
}

// popLocked lets the stored (or dropped) head write go: an idle session keeps none of
// its text. q.mu is held.
func (q *Queue) popLocked() {
	q.items[0] = Write{}
	q.items = q.items[1:]
	q.w.metrics.depth.Add(-1)
	if len(q.items) == 0 {
		q.items = nil
		q.w.metrics.queued(q, false)
	}
}

// haltLocked stops the writer at the head write, which waits for a retry: the node
// retries it when its database answers again (Writer.Kick), unless the queue is fenced
// out and will never write again. q.mu is held.
func (q *Queue) haltLocked() {
	if !q.halted {
		q.halted = true
		if !q.fencedOut.Load() {
			q.w.halt(q, true)
		}
	}
}

// unhaltLocked lets the writer go on. q.mu is held.
func (q *Queue) unhaltLocked() {
	if q.halted {
		q.halted = false
		q.w.halt(q, false)
	}
}

// scheduleRetryLocked arms the retry of a halted queue, backing off while it keeps
// failing. A closing queue paces its own retries (Close). q.mu is held.
func (q *Queue) scheduleRetryLocked() {
	if q.closing || q.retry != nil {
		return
	}
	if !q.extra || q.retryDelay == 0 {
		q.retryDelay = min(max(2*q.retryDelay, retryMin), retryMax)
	}
	q.extra = false
	q.retry = q.w.clock.AfterFunc(q.retryDelay, q.Flush)
}

// Flush retries the queued writes now, oldest first, in the background: the retry
// timer, and the node once the database answers again. Safe from any goroutine.
func (q *Queue) Flush() { q.flush(false) }

// flush retries the queued writes now; extra marks a try out of the backoff's schedule.
func (q *Queue) flush(extra bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if extra && q.halted {
		q.extra = true
	}
	if q.retry != nil {
		q.retry.Stop()
		q.retry = nil
	}
	if !q.fencedOut.Load() {
		q.unhaltLocked()
	}
	q.startLocked()
}

// wait waits until the writer has tried every queued write: the queue is empty, or
// halted at a write that failed.
func (q *Queue) wait() {
	q.mu.Lock()
	done, busy := q.done, q.busy
	q.mu.Unlock()
	if busy {
		<-done
	}
}

// Await waits until every write queued so far has been tried, for a step that must not
// go on before the database has them (Class BeforeAnnounce). A queue halted at a write
// that failed is retried once at once. It reports whether the queue is empty, stored or
// dropped; what the writer reported is in Outcomes. It blocks the caller for at most a
// statement timeout per write.
func (q *Queue) Await() bool {
	return q.settle(true)
}

// settle waits until the writer is idle, retrying a halted queue once when retry is set,
// and reports whether it is empty. The verdict is taken with q.mu held and no writer
// running: a retry timer or a Kick that starts the writer meanwhile is waited for too.
func (q *Queue) settle(retry bool) bool {
	for {
		q.mu.Lock()
		if q.busy {
			done := q.done
			q.mu.Unlock()
			<-done
			continue
		}
		if retry && q.halted && !q.fencedOut.Load() {
			retry = false
			q.extra = true
			if q.retry != nil {
				q.retry.Stop()
				q.retry = nil
			}
			q.unhaltLocked()
			q.startLocked()
			q.mu.Unlock()
			continue
		}
		empty := !q.halted && len(q.items) == 0
		q.mu.Unlock()
		return empty
	}
}

// Do makes a statement of Class BeforeAck: after the writes queued before it (Await),
// under the current fence, within a statement timeout. It returns ErrWaits, without
// making it, when an earlier write waits for a retry: the session's writes stay in the
// order they were made. A statement the fence refuses fences the queue out.
func (q *Queue) Do(f func(ctx context.Context) error) error {
	if q.fencedOut.Load() {
		return ErrFencedOut
	}
	if !q.Await() {
		if q.fencedOut.Load() {
			return ErrFencedOut
		}
		return ErrWaits
	}
	fence := q.fence.Load()
	if q.leased && fence == 0 {
		return ErrNoFence
	}
	ctx, cancel := context.WithTimeout(context.Background(), q.w.cfg.StatementTimeout)
	defer cancel()
	err := f(withFence(ctx, fence))
	if Classify(err) == Fenced && q.fencedOut.CompareAndSwap(false, true) {
		q.w.metrics.fenced.Inc()
		q.log().Warn().Err(err).Msg("a write was refused by the lease's fence: another node holds the session")
	}
	return err
}

// Pending reports whether writes are queued (being stored, or waiting for a retry).
func (q *Queue) Pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) > 0
}

// Halted reports whether the queue waits for a retry of a write that failed.
func (q *Queue) Halted() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.halted
}

// Outcomes returns what the writer left for the actor since it last looked.
func (q *Queue) Outcomes() []Outcome {
	q.mu.Lock()
	defer q.mu.Unlock()
	o := q.outcomes
	q.outcomes = nil
	return o
}

// Queued returns a copy of the queued writes, oldest first: what reads lay over the
// database. Take it before reading: a write the writer stores meanwhile is then either
// in what the database answers or in the copy.
func (q *Queue) Queued() []Write {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	return slices.Clone(q.items)
}

// Halt stops the writer after the write in flight, waits for it, and forgets what is
// left: the actor stops without storing it (fenced out: another node holds the session,
// and its view wins).
func (q *Queue) Halt() {
	q.mu.Lock()
	q.haltLocked()
	if q.retry != nil {
		q.retry.Stop()
		q.retry = nil
	}
	q.mu.Unlock()
	q.wait()
	q.Discard()
}

// Discard forgets the queued writes: their session was deleted, or another node holds
// it. A write in flight ends on its own.
func (q *Queue) Discard() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.retry != nil {
		q.retry.Stop()
		q.retry = nil
	}
	if n := len(q.items); n > 0 {
		q.w.metrics.depth.Add(-int64(n))
		q.w.metrics.queued(q, false)
	}
	q.items, q.outcomes, q.retryDelay = nil, nil, 0
	q.unhaltLocked()
}

// Close stores what is queued before the actor stops: writes that fail in a way that may
// pass are retried, every closeRetry, until they are stored or ctx ends. It returns the
// writes it could not store, each logged at error level (the next process to take the
// session up continues its run from what was stored).
func (q *Queue) Close(ctx context.Context) []Write {
	q.mu.Lock()
	q.closing, q.base = true, ctx
	q.mu.Unlock()
	for {
		q.Flush()
		if q.settle(false) || q.fencedOut.Load() || !q.pause(ctx) {
			break
		}
	}
	if q.fencedOut.Load() {
		q.Discard() // another node holds the session: what is left is not ours to store
		return nil
	}
	left := q.Queued()
	for _, w := range left {
		ev := q.log().Error().Str("table", w.Table()).Str("id", w.ID().String()).Str("statement", w.statement())
		if w.Run != nil {
			ev = ev.Str("run_id", w.Run.ID.String()).Str("status", string(w.Run.Status))
		}
		ev.Msg("stopping with a write the database did not take")
	}
	q.Discard()
	return left
}

// pause waits closeRetry before the next try of a closing queue; false when ctx ended
// first.
func (q *Queue) pause(ctx context.Context) bool {
	t := q.w.clock.NewTimer(closeRetry)
	defer t.Stop()
	select {
	case <-t.Chan():
		return true
	case <-ctx.Done():
		return false
	}
}

// notify tells the actor the writer has news (an outcome, or an idle writer).
func (q *Queue) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
	if q.onSignal != nil {
		q.onSignal()
	}
}

// oldest returns when the oldest queued write was queued (ok false when none is).
func (q *Queue) oldest() (time.Time, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return time.Time{}, false
	}
	return q.items[0].queuedAt, true
}
