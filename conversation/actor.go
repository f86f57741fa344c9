package conversation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/internal/counter"
	"github.com/chatd/chatd/journal"
)

// Actor is the ConversationModel of one session. Its state is owned by whichever
// goroutine holds its turn: its loop, or a run's agent handling what it emits inline while
// the actor is idle (Actor.inline). The exported methods send intents to the loop and wait
// for the answer.
type Actor struct {
	id    uuid.UUID
	epoch string
	cfg   Config
	// log is built on first use: a logger with context costs half a KiB, and most
	// sessions never log.
	log     zerolog.Logger
	logOnce sync.Once

	// published counts the events it publishes (chatd_events_published_total).
	published *counter.Slot
	// spare is the last event published, for the next, when nothing kept it; spareEnc
	// the buffer of its encoding, when nothing held that either.
	spare    *publishedEvent
	spareEnc []byte

	inbox chan intent
	// loopState says whether the loop has a goroutine (loopRunning, loopPoked) or gave
	// it back while the actor had nothing to do between runs (loopParked): a quiet
	// session costs no goroutine and no stack. Whatever sends to the inbox, timerC,
	// unsubs.signal or the journal's signal pokes it afterwards (poke), which starts
	// the loop again.
	loopState atomic.Int32
	// pending counts the intents sent to the inbox (or being sent) and not yet taken by
	// a pass: an intent is handled on its sender's goroutine (inline) only while none is.
	pending atomic.Int64
	// turn is held by whichever goroutine handles the actor's state: the loop during a
	// pass, or a sender handling its intent inline. What the comments call owned by the
	// loop is owned by the holder of turn.
	turn   sync.Mutex
	timerC chan timerFire
	// unsubs are the subscribers that asked to go: apart from the inbox, so that
	// leaving never waits for a busy actor and is never lost (Unsubscribe).
	unsubs struct {
		mu     sync.Mutex
		subs   []leaving
		signal chan struct{}
	}
	// hellos numbers the hellos as they are sent, so an unsubscribe knows which hellos
	// of its subscriber it comes after.
	hellos atomic.Uint64
	// leftEarly are subscribers that unsubscribed before a hello of theirs was handled,
	// with the number of the last hello sent then: such a hello subscribes nothing, a
	// later one does. Owned by the loop goroutine.
	leftEarly map[Subscriber]uint64
	done      chan struct{} // closed once the actor takes no more intents
	finished  chan struct{} // closed once it also has no run goroutine left
	closeOnce sync.Once
	runs      sync.WaitGroup
	onStop    func(a *Actor, stop func())

	// Owned by the loop goroutine.
	journal *sessionJournal
	session *chat.Session // nil until loaded, or while the session does not exist
	seq     int64
	ring    *ring
	subs    map[Subscriber]struct{}
	// holding: a subscriber may hold events published while the inbox was not empty
	// (HoldingSubscriber); flushIdle has them sent.
	holding bool
	// behindPasses counts the loop's passes in a row that ended with more queued.
	behindPasses int
	run          *runState       // the active run, nil when none
	lastCalls    map[string]bool // tool call ids of the run that ended last
	// rules are the session's approval rules, read on first use (rulesLoaded).
	rules       []chat.ApprovalRule
	rulesLoaded bool
	// queued are the messages waiting behind the active run, oldest first, read on
	// first use (queuedLoaded; see queue.go).
	queued []chat.Queued
	// queuedTokens are the bearer tokens queued messages were sent with, by request id
	// (SendRequest.Token): memory only.
	queuedTokens map[string]string
	queuedLoaded bool
	// steered: the requestIds of steering messages runs have taken, with their runs,
	// for a repeated send (this actor's only: a restarted one has forgotten them).
	steered map[string]uuid.UUID
	// forked: a run wrote an answer beside older ones away from the active leaf (a
	// regeneration whose branch is no longer shown); the active path may go through an
	// older answer, which has a new sibling, so tabs are sent the path again (branch.go).
	forked    bool
	stopped   bool
	evicted   bool
	idleT     actorTimer
	abandonT  actorTimer
	coalesceT actorTimer // ends the window of held text, armed while there is some
	progressT actorTimer // ends the window in which progress is not stored again
	quietT    actorTimer // ends the quiet time after which the recent messages go
	held      heldDelta
	// lastText is when the last piece of text came while the Pacer had a window open,
	// and textGap how long after the one before it (sendsAtOnce).
	lastText time.Time
	textGap  time.Duration
	// checkedSuspended: the session's latest run was looked at for takeUpSuspended.
	checkedSuspended bool
	// stopCtx bounds what the actor stores as it stops (a shutdown's budget).
	stopCtx context.Context

	// inlined counts the intents handled inline (for tests).
	inlined int

	// leaseToken mirrors the journal's lease token for the hub's renewals.
	leaseToken atomic.Int64
}

// Start launches the actor of session id with a new epoch. cfg must be valid (see
// Config.Validate). Intents that reach a stopped actor fail with ErrStopped.
//
// onStop, when not nil, is called from the actor's goroutine when it stops on its own
// (after IdleTimeout with no subscribers and no run). It must call stop, which closes
// Done; the hub forgets the actor and calls stop under one lock, so a session never has
// two actors that take intents, and a stopped actor is never handed out.
func Start(cfg Config, id uuid.UUID, onStop func(a *Actor, stop func())) *Actor {
	cfg = cfg.withDefaults()
	epoch := newEpoch()
	a := &Actor{
		id:       id,
		epoch:    epoch,
		cfg:      cfg,
		inbox:    make(chan intent, cfg.InboxSize),
		timerC:   make(chan timerFire, timerKinds),
		done:     make(chan struct{}),
		finished: make(chan struct{}),
		onStop:   onStop,
		ring:     newRing(cfg.RingEvents, cfg.RingBytes),
		subs:     make(map[Subscriber]struct{}),

		idleT:     actorTimer{kind: timerIdle, timers: cfg.Evictions},
		abandonT:  actorTimer{kind: timerAbandon, timers: cfg.Abandonments},
		coalesceT: actorTimer{kind: timerCoalesce},
		progressT: actorTimer{kind: timerProgress},
		quietT:    actorTimer{kind: timerQuiet},
	}
	a.published = cfg.Metrics.eventsPublished.Slot()
	a.journal = newSessionJournal(cfg.Store, cfg.Journal, id, cfg.Metrics, a.logger, cfg.Lease, a.poke)
	a.journal.token = &a.leaseToken
	a.unsubs.signal = make(chan struct{}, 1)
	a.loopState.Store(loopRunning)
	go a.loop(true)
	return a
}

// logger returns the actor's logger, which names its session and epoch.
func (a *Actor) logger() *zerolog.Logger {
	a.logOnce.Do(func() {
		a.log = a.cfg.Logger.With().Str("component", "conversation").Str("session_id", a.id.String()).Str("epoch", a.epoch).Logger()
	})
	return &a.log
}

// SessionID returns the id of the actor's session.
func (a *Actor) SessionID() uuid.UUID { return a.id }

// Epoch returns the actor's epoch: it names this incarnation's event sequence.
func (a *Actor) Epoch() string { return a.epoch }

// Done is closed once the actor has stopped taking intents.
func (a *Actor) Done() <-chan struct{} { return a.done }

// Wait blocks until the actor has stopped and every run goroutine it started has returned,
// or ctx ends.
func (a *Actor) Wait(ctx context.Context) error {
	select {
	case <-a.finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for session %s: %w", a.id, ctx.Err())
	}
}

// The loop's states (Actor.loopState).
const (
	loopParked  int32 = iota // no goroutine: the next poke starts one
	loopRunning              // a goroutine runs the loop
	loopPoked                // one does, and something was sent since it last looked
	loopStopped              // the actor stopped: nothing starts the loop again
)

// loop makes the actor's passes until it stops, or until it parks (park).
func (a *Actor) loop(first bool) {
	a.turn.Lock()
	if first {
		a.checkTimers()
	}
	// A loop started again looks first: what it was started for may have been taken by
	// the loop before it, after the poke was on its way.
	idle := !first && a.run == nil && !a.stopped
	a.turn.Unlock()
	if idle && a.parked() {
		return
	}
	for {
		more, parkable := a.pass()
		if !more {
			break
		}
		if parkable && a.parked() {
			return
		}
	}
	a.loopState.Store(loopStopped)
	// Stopped: no intent is handled inline any more, but the turn is held so that what
	// follows is ordered after the last one.
	a.turn.Lock()
	// What is queued is stored before the lease goes (an eviction's suspend queued the
	// run's state), retried within the stop's budget; a fenced-out writer stops after
	// the write it is making. A lease the actor still holds goes back at once: another
	// node may then take the session without waiting for it to expire.
	if a.journal.q.FencedOut() {
		a.journal.q.Halt()
	} else {
		ctx := a.stopCtx
		if ctx == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.Background(), journal.DefaultStatementTimeout)
			defer cancel()
		}
		// What it could not store is logged, write by write; the process that takes
		// the session up next continues its run from what was stored.
		a.journal.q.Close(ctx)
	}
	a.journal.releaseLease()
	a.idleT.disarm()
	a.abandonT.disarm()
	a.coalesceT.disarm()
	a.progressT.disarm()
	a.quietT.disarm()
	if a.evicted && a.onStop != nil {
		a.onStop(a, a.closeDone)
	}
	a.closeDone()
	a.turn.Unlock()
	// The run goroutines end once they see their cancelled contexts; the loop's
	// goroutine is the one that waits for them, so Wait needs no goroutine of its own.
	a.runs.Wait()
	close(a.finished)
}

// parked parks the loop (park), reporting whether it did.
func (a *Actor) parked() bool {
	if !a.park() {
		return false
	}
	if a.cfg.onParked != nil {
		a.cfg.onParked()
	}
	return true
}

// park gives the loop's goroutine back, reporting true, unless something was sent to the
// actor that the loop has not taken yet. Whoever sends something next starts the loop
// again (poke). Between the two, intents are handled inline as ever, and a run they
// start streams with the loop parked until something is sent to it.
//
// The senders put first and poke after; park clears the pokes first and looks after, so
// what is sent is either seen here or pokes a loop that parked (the swap and the
// compare-and-swap order the two). A poke between the two, for something the loop took
// already, has it look again.
func (a *Actor) park() bool {
	for {
		a.loopState.Swap(loopRunning)
		if len(a.inbox) > 0 || len(a.timerC) > 0 || len(a.unsubs.signal) > 0 || len(a.journal.q.Signal()) > 0 {
			return false
		}
		if a.loopState.CompareAndSwap(loopRunning, loopParked) {
			return true
		}
	}
}

// poke has the loop take what was just sent to the actor: it starts the loop's goroutine
// when the loop parked, and otherwise tells it not to park before it has looked.
func (a *Actor) poke() {
	for {
		switch a.loopState.Load() {
		case loopParked:
			if a.loopState.CompareAndSwap(loopParked, loopRunning) {
				go a.loop(false)
				return
			}
		case loopRunning:
			if a.loopState.CompareAndSwap(loopRunning, loopPoked) {
				return
			}
		case loopPoked:
			// Written, not only read, so that what was sent is ordered before the
			// loop's next look (park's swap reads it).
			if a.loopState.CompareAndSwap(loopPoked, loopPoked) {
				return
			}
		default: // stopped
			return
		}
	}
}

// pass waits for the next thing to do and does it, holding the actor's turn. It reports
// more false once the actor has stopped (in this pass, or in an intent handled inline),
// and parkable when the actor was left with nothing that keeps its loop busy: no run.
func (a *Actor) pass() (more, parkable bool) {
	var (
		it   intent
		fire timerFire
		what int
	)
	const (
		gotIntent = iota + 1
		gotTimer
		gotWrites
		gotUnsubs
	)
	select {
	case it = <-a.inbox:
		what = gotIntent
	case fire = <-a.timerC:
		what = gotTimer
	case <-a.journal.q.Signal():
		what = gotWrites
	case <-a.unsubs.signal:
		what = gotUnsubs
	}
	a.turn.Lock()
	defer a.turn.Unlock()
	if what == gotIntent {
		a.pending.Add(-1)
	}
	if a.stopped { // in an intent handled inline; one taken now is left unanswered, as in the inbox
		return false, false
	}
	switch what {
	case gotIntent:
		a.handle(it)
	case gotTimer:
		a.onTimer(fire)
	case gotWrites:
		a.onWrites()
	case gotUnsubs:
		a.takeUnsubscribes()
	}
	a.afterPass()
	return !a.stopped, a.run == nil
}

// afterPass is what follows each intent, timer or signal the actor handles.
func (a *Actor) afterPass() {
	if a.journal.q.FencedOut() {
		a.moved("a write was refused by the lease's fence")
	}
	if a.forked && !a.stopped {
		a.publishForked()
	}
	if !a.stopped {
		a.startQueued()
		a.flushIdle()
	}
	a.checkTimers()
}

// inline handles it on the calling goroutine, as a pass of the loop would, when the actor
// is idle: no intent waits in its inbox and no pass is under way. It reports false, having
// done nothing, otherwise; the caller then sends it to the inbox.
//
// A run's agent emits most of its intents (a token each) while the actor is idle. Handled
// where they come from, they cost no hand-off to the loop's goroutine: no channel send
// that wakes it, no select, no park, which on 16 cores were the largest cost chatd had per
// token beyond a plain WebSocket server's. Intents keep their order: one is handled inline
// only when every intent sent to the inbox before it has been handled.
func (a *Actor) inline(it intent) bool {
	if a.pending.Load() != 0 || !a.turn.TryLock() {
		return false
	}
	if a.stopped || a.pending.Load() != 0 {
		a.turn.Unlock()
		return false
	}
	handled := false
	defer func() {
		if handled {
			return
		}
		// A handler panicked. On the loop that ends the process; here the agent's
		// goroutine would unwind into recovers of its own (a crashed agent, a crashed
		// tool) and leave the session with an actor in a half-changed state, so it ends
		// the process all the same, with the handler's stack.
		p, stack := recover(), debug.Stack()
		go panic(fmt.Sprintf("conversation: an intent's handler panicked: %v\n\n%s", p, stack))
		select {} // the process is ending
	}()
	a.handle(it)
	a.afterPass()
	a.inlined++
	handled = true
	stopped := a.stopped
	a.turn.Unlock()
	if stopped {
		a.wakeLoop() // to stop: it waits in its select
	}
	return true
}

// wakeLoop has the loop make a pass (it finds nothing to do but what a pass always does).
func (a *Actor) wakeLoop() {
	select {
	case a.unsubs.signal <- struct{}{}:
	default:
	}
	a.poke()
}

func (a *Actor) onTimer(f timerFire) {
	switch f.kind {
	case timerIdle:
		if a.idleT.fired(f) && a.idle() {
			if a.run != nil {
				a.suspend(a.run) // it waits for a decision: on, from the database
			}
			a.logger().Debug().Msg("evicting idle conversation")
			a.evicted = true
			a.stopped = true
		}
	case timerCoalesce:
		if a.coalesceT.fired(f) {
			a.flushDelta()
		}
	case timerProgress:
		if a.progressT.fired(f) {
			a.storeProgress()
		}
	case timerQuiet:
		if a.quietT.fired(f) && a.quiet() {
			dropped := a.journal.recent.bytes + a.ring.forget()
			a.journal.recent.forget()
			a.spare, a.spareEnc = nil, nil
			a.cfg.Memory.dropped(dropped)
			a.cfg.Metrics.released.Inc()
		}
	case timerAbandon:
		if a.abandonT.fired(f) && a.abandonable() {
			a.logger().Info().Str("run_id", a.run.info.ID.String()).Dur("after", a.cfg.AbandonAfter).Msg("cancelling a run nobody watches")
			a.finish(a.run, chat.RunCancelled, nil, chat.CancelAbandoned)
		}
	}
}

// quiet reports whether the actor holds messages or replayable events in memory it
// could drop: no run is active and no write waits (the recent messages are what was
// stored, and a tab that missed events can have a snapshot instead).
func (a *Actor) quiet() bool {
	return a.cfg.QuietRelease > 0 && a.run == nil && (a.journal.recent.known || a.ring.n > 0) && !a.journal.q.Pending() && !a.stopped
}

// checkTimers arms the timers whose condition holds and disarms the others.
func (a *Actor) checkTimers() {
	if a.quiet() {
		a.arm(&a.quietT, a.cfg.QuietRelease)
	} else {
		a.quietT.disarm()
	}
	if a.idle() && !a.stopped {
		a.arm(&a.idleT, a.cfg.IdleTimeout)
	} else {
		a.idleT.disarm()
	}
	if a.abandonable() && !a.stopped {
		a.arm(&a.abandonT, a.cfg.AbandonAfter)
	} else {
		a.abandonT.disarm()
	}
}

// abandonable reports whether the active run streams with nobody watching. A run that
// waits for an approval waits indefinitely: that is not abandonment.
func (a *Actor) abandonable() bool {
	return a.run != nil && a.run.info.Status == chat.RunRunning && len(a.subs) == 0
}

func (a *Actor) closeDone() {
	a.closeOnce.Do(func() { close(a.done) })
}

func (a *Actor) handle(it intent) {
	switch it := it.(type) {
	case *helloIntent:
		v, err := a.hello(it.req, it.n)
		it.reply <- result[HelloResult]{v, err}
		if refusedHello(err) && a.run == nil && a.idle() {
			// Nothing to keep it for: a hello for a missing session, or someone else's,
			// must not leave an actor (and its memory) behind, or a stream of them is a
			// cheap attack on memory.
			a.evicted, a.stopped = true, true
		}
	case *sendIntent:
		v, err := a.send(it.req)
		it.reply <- result[SendResult]{v, err}
	case *cancelIntent:
		v, err := a.cancel(it.runID)
		it.reply <- result[CancelResult]{v, err}
	case *runInfoIntent:
		v, err := a.runInfo(it.runID)
		it.reply <- result[chat.Run]{v, err}
	case *historyIntent:
		v, err := a.history(it.before, it.limit)
		it.reply <- result[HistoryPage]{v, err}
	case *stopIntent:
		a.stopCtx = it.ctx
		a.stop()
		it.reply <- result[struct{}]{}
	case *flushIntent:
		var err error
		if !a.journal.q.Await() {
			err = errorf(CodeStorage, "writes of the session wait for a retry: the database is unavailable")
		}
		a.onWrites()
		it.reply <- result[struct{}]{err: err}
	case *deleteIntent:
		a.deleted()
		it.reply <- result[struct{}]{}
	case *rescueIntent:
		it.reply <- result[struct{}]{err: a.rescue()}
	case *leaseLostIntent:
		if it.token != 0 && it.token == a.leaseToken.Load() {
			a.moved("a renewal found the lease another node's")
		}
		it.reply <- result[struct{}]{}
	case *textIntent:
		a.onText(it.run, it.text)
	case *toolStartIntent:
		it.reply <- a.onToolStart(it.run, it.call)
	case *toolOutputIntent:
		a.onToolOutput(it.run, it.callID, it.text)
	case *toolEndIntent:
		it.reply <- a.onToolEnd(it.run, it.callID, it.result)
	case *runEndIntent:
		a.onRunEnd(it.run, it.err)
	case *decideIntent:
		v, err := a.decide(it.req)
		it.reply <- result[DecideResult]{v, err}
	case *approvalIntent:
		ch, err := a.onAwaitApproval(it.run, it.call)
		it.reply <- result[<-chan Decision]{ch, err}
	case *continueIntent:
		v, err := a.continueRun(it.req)
		it.reply <- result[SendResult]{v, err}
	case *dismissIntent:
		v, err := a.dismiss(it.runID)
		it.reply <- result[SendResult]{v, err}
	case *awaitDecisionIntent:
		ch, err := a.onAwaitDecision(it.run, it.callID)
		it.reply <- result[<-chan Decision]{ch, err}
	case *expireIntent:
		it.reply <- a.onExpire(it.run, it.callID)
	case *revokeIntent:
		it.reply <- result[struct{}]{struct{}{}, a.revoke(it.ruleID)}
	case *branchIntent:
		it.reply <- result[struct{}]{struct{}{}, a.selectBranch(it.id)}
	case *branchReadIntent:
		page, err := a.readBranch(it.id, it.before, it.limit)
		it.reply <- result[HistoryPage]{page, err}
	case *unqueueIntent:
		it.reply <- result[struct{}]{struct{}{}, a.unqueue(it.requestID)}
	case *pausedIntent:
		it.reply <- a.onPaused(it.run, it.resumed)
	case *usageIntent:
		a.onUsage(it.run, it.usage)
	case *progressIntent:
		a.onProgress(it.run, it.progress)
	case *agentStateIntent:
		a.onAgentState(it.run, it.state)
	case *noticeIntent:
		it.reply <- a.onNotice(it.run, it.text)
	case *steerIntent:
		v, err := a.onSteer(it.run)
		it.reply <- result[[]string]{v, err}
	case *reasoningIntent:
		a.onReasoning(it.run, it)
	default:
		panic(fmt.Sprintf("conversation: unknown intent %T", it))
	}
}

// takeUnsubscribes removes the subscribers that asked to go. One not subscribed (its
// hello is still in the inbox, or failed) is remembered, so that its hello subscribes
// nothing.
func (a *Actor) takeUnsubscribes() {
	a.unsubs.mu.Lock()
	subs := a.unsubs.subs
	a.unsubs.subs = nil
	a.unsubs.mu.Unlock()
	for _, l := range subs {
		if _, ok := a.subs[l.sub]; ok {
			delete(a.subs, l.sub)
			continue
		}
		if a.leftEarly == nil || len(a.leftEarly) > 1000 {
			// A hello waits in the inbox for an instant, not for a thousand leavers.
			a.leftEarly = make(map[Subscriber]uint64)
		}
		a.leftEarly[l.sub] = l.hellos
	}
}

// leaving is an unsubscribe, with the number of the last hello sent when it was made.
type leaving struct {
	sub    Subscriber
	hellos uint64
}

// refusedHello reports whether err refused a hello for a session the caller may not
// have: missing, another user's, or deleted.
func refusedHello(err error) bool {
	return errors.Is(err, ErrNoSession) || errors.Is(err, ErrNotYours) || errors.Is(err, ErrDeleted)
}

// idle reports whether the actor holds nothing that needs it: no subscriber, no run, and
// no write still to be retried.
func (a *Actor) idle() bool {
	return (a.run == nil || a.parkable()) && len(a.subs) == 0 && !a.journal.q.Pending()
}

// parkable reports whether the active run only waits for a person's decision, so it
// needs no goroutine and no actor: with nobody watching, the actor may be evicted, the
// run stored as it is (suspended), and continued from its checkpoint by the actor the
// next hello or decision starts. Only when runs are continued (SuspendOnStop).
func (a *Actor) parkable() bool {
	r := a.run
	return a.cfg.SuspendOnStop && r != nil && len(r.approvals) > 0 &&
		(r.info.Status == chat.RunAwaitingApproval || r.info.Status == chat.RunPaused)
}

func (a *Actor) now() time.Time { return chat.Timestamp(a.cfg.Clock.Now()) }

// storageError logs a store call of op that failed and returns what the client that
// asked for op is told (StoreError).
func (a *Actor) storageError(op string, err error) *Error {
	a.logger().Error().Err(err).Str("op", op).Msg("database call failed")
	return StoreError(op, err)
}

func (a *Actor) stop() {
	switch {
	case a.run != nil && a.cfg.SuspendOnStop:
		a.suspend(a.run)
	case a.run != nil:
		a.finish(a.run, chat.RunInterrupted, &chat.ErrorInfo{
			Code:    CodeInterrupted,
			Message: "the server shut down during this run",
		}, chat.CancelShutdown)
	}
	for sub := range a.subs {
		delete(a.subs, sub)
		sub.Dropped(DropShutdown)
	}
	a.stopped = true // the loop stores what is queued as it ends
}

// deleted ends the actor of a deleted session: the active run is cancelled, every
// subscriber is let go with DropDeleted (its connection closes for good), and the actor
// stops and leaves its hub. Writes still to be retried are dropped: their rows are being
// deleted.
func (a *Actor) deleted() {
	if a.run != nil {
		a.finish(a.run, chat.RunCancelled, nil, chat.CancelUser)
	}
	for sub := range a.subs {
		delete(a.subs, sub)
		sub.Dropped(DropDeleted)
	}
	a.journal.q.Discard()
	a.journal.recent.forget()
	if a.session != nil && a.session.DeletedAt == nil {
		now := a.now()
		a.session.DeletedAt = &now
	}
	a.evicted = true // the hub forgets it, as it does an idle one
	a.stopped = true
}

// live returns the error of a command on a session that does not exist or was deleted.
func (a *Actor) live() error {
	switch {
	case a.session == nil:
		return errorf(CodeNotFound, "the session does not exist")
	case a.session.DeletedAt != nil:
		return ErrDeleted
	}
	return nil
}

// gone answers a write the database refused because the session is no longer there:
// deleted, by another process or while this one still held it. The actor ends as
// deleted and the command gets ErrDeleted.
func (a *Actor) gone(op string, err error) error {
	a.logger().Warn().Err(err).Str("op", op).Msg("the session was deleted")
	a.deleted()
	return ErrDeleted
}

// deletedElsewhere ends the actor of a session whose rows are gone under it (another
// node, or an operator, deleted it): the active run ends with an error that says so,
// then the actor ends as deleted. Nothing is retried: there is nothing left to write to.
func (a *Actor) deletedElsewhere(err error) {
	if a.stopped {
		return
	}
	a.logger().Warn().Err(err).Msg("the session was deleted under this actor")
	if a.run != nil {
		a.finish(a.run, chat.RunError, &chat.ErrorInfo{Code: CodeNotFound, Message: "the session was deleted"}, "")
	}
	a.deleted()
}

// load reads the session when the actor does not know it yet. It is retried on the next
// intent when the database fails.
func (a *Actor) load() error { return a.loadAs("", false) }

// loadAs is load for a hello of owner: with check, another user's session is read but
// not acquired (its lease stays where it is), since the actor will only refuse it.
func (a *Actor) loadAs(owner string, check bool) error {
	if a.session != nil && a.journal.loaded {
		return nil
	}
	sess, err := a.journal.load(owner, check)
	if err != nil {
		return err
	}
	a.session = sess
	return nil
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}
