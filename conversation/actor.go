package conversation

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// storeTimeout bounds each database call the actor makes, so a hung database cannot
// freeze a session forever.
const storeTimeout = 10 * time.Second

// A write that failed is retried after retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// Actor is the ConversationModel of one session. All its state is owned by one goroutine;
// the exported methods send intents to it and wait for the answer.
type Actor struct {
	id    uuid.UUID
	epoch string
	cfg   Config
	// log is built on first use: a logger with context costs half a KiB, and most
	// sessions never log.
	log     zerolog.Logger
	logOnce sync.Once

	inbox     chan intent
	timerC    chan timerFire
	done      chan struct{} // closed once the actor takes no more intents
	closeOnce sync.Once
	runs      sync.WaitGroup
	onStop    func(a *Actor, stop func())

	// Owned by the loop goroutine.
	loaded    bool
	session   *chat.Session // nil until loaded, or while the session does not exist
	nextPos   int64
	seq       int64
	ring      *ring
	subs      map[Subscriber]struct{}
	run       *runState       // the active run, nil when none
	lastCalls map[string]bool // tool call ids of the run that ended last
	stopped   bool
	evicted   bool
	idleT     actorTimer
	abandonT  actorTimer
	retryT    actorTimer
	coalesceT actorTimer // ends the window of held text, armed while there is some
	held      heldDelta

	// Writes that failed, newest version of each row, kept until a retry stores them.
	// Clients were told of these states, so snapshots and history show them too.
	unsavedMsgs map[uuid.UUID]chat.Message
	unsavedRuns map[uuid.UUID]chat.Run
	retryDelay  time.Duration
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
		id:     id,
		epoch:  epoch,
		cfg:    cfg,
		inbox:  make(chan intent, cfg.InboxSize),
		timerC: make(chan timerFire),
		done:   make(chan struct{}),
		onStop: onStop,
		ring:   newRing(cfg.RingEvents, cfg.RingBytes),
		subs:   make(map[Subscriber]struct{}),

		unsavedMsgs: make(map[uuid.UUID]chat.Message),
		unsavedRuns: make(map[uuid.UUID]chat.Run),

		idleT:    actorTimer{kind: timerIdle},
		abandonT: actorTimer{kind: timerAbandon},
		retryT:   actorTimer{kind: timerRetry},

		coalesceT: actorTimer{kind: timerCoalesce},
	}
	go a.loop()
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
	finished := make(chan struct{})
	go func() {
		<-a.done
		a.runs.Wait()
		close(finished)
	}()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for session %s: %w", a.id, ctx.Err())
	}
}

// HelloRequest subscribes Subscriber to the session.
type HelloRequest struct {
	// Owner is the authenticated user; the session is created for them when new.
	Owner string
	// Epoch and LastSeq are where the subscriber's state is, if it has any; a matching
	// epoch with a gap still in the ring is answered with a replay.
	Epoch   string
	LastSeq int64
	// Subscriber receives the catch-up frames and then every live event.
	Subscriber Subscriber
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
// It creates the session when it does not exist, and returns ErrNotYours when it belongs
// to someone else, *Error with CodeStorage when the database fails, or ErrStopped.
func (a *Actor) Hello(ctx context.Context, req HelloRequest) (HelloResult, error) {
	return call(ctx, a, func(r chan result[HelloResult]) intent { return &helloIntent{req, r} })
}

// SendRequest starts a run with a user message.
type SendRequest struct {
	RequestID string
	Content   string
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
func (a *Actor) Unsubscribe(ctx context.Context, sub Subscriber) {
	select {
	case a.inbox <- &unsubscribeIntent{sub}:
	case <-a.done:
	case <-ctx.Done():
	}
}

// Stop ends the actor for a server shutdown: the active run is stored and ended as
// interrupted, subscribers are dropped with DropShutdown, and the actor stops taking
// intents. Use Wait to wait for the run goroutine.
func (a *Actor) Stop(ctx context.Context) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &stopIntent{r} })
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
	unsubscribeIntent struct{ sub Subscriber }
	stopIntent        struct{ reply chan result[struct{}] }
)

// call sends an intent built around a reply channel and waits for the answer. The reply
// channel has room for the answer, so the actor never blocks on a caller that gave up.
func call[T any](ctx context.Context, a *Actor, build func(chan result[T]) intent) (T, error) {
	var zero T
	reply := make(chan result[T], 1)
	select {
	case a.inbox <- build(reply):
	case <-a.done:
		return zero, ErrStopped
	case <-ctx.Done():
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

func (a *Actor) loop() {
	a.checkTimers()
	for !a.stopped {
		select {
		case it := <-a.inbox:
			a.handle(it)
		case f := <-a.timerC:
			a.onTimer(f)
		}
		a.checkTimers()
	}
	a.idleT.disarm()
	a.abandonT.disarm()
	a.retryT.disarm()
	a.coalesceT.disarm()
	if a.evicted && a.onStop != nil {
		a.onStop(a, a.closeDone)
	}
	a.closeDone()
}

func (a *Actor) onTimer(f timerFire) {
	switch f.kind {
	case timerIdle:
		if a.idleT.fired(f) && a.idle() {
			a.logger().Debug().Msg("evicting idle conversation")
			a.evicted = true
			a.stopped = true
		}
	case timerRetry:
		if a.retryT.fired(f) {
			a.flushUnsaved()
		}
	case timerCoalesce:
		if a.coalesceT.fired(f) {
			a.flushDelta()
		}
	case timerAbandon:
		if a.abandonT.fired(f) && a.abandonable() {
			a.logger().Info().Str("run_id", a.run.info.ID.String()).Dur("after", a.cfg.AbandonAfter).Msg("cancelling a run nobody watches")
			a.finish(a.run, chat.RunCancelled, nil, chat.CancelAbandoned)
		}
	}
}

// checkTimers arms the timers whose condition holds and disarms the others.
func (a *Actor) checkTimers() {
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
		v, err := a.hello(it.req)
		it.reply <- result[HelloResult]{v, err}
	case *sendIntent:
		v, err := a.send(it.req)
		it.reply <- result[SendResult]{v, err}
	case *cancelIntent:
		v, err := a.cancel(it.runID)
		it.reply <- result[CancelResult]{v, err}
	case *historyIntent:
		v, err := a.history(it.before, it.limit)
		it.reply <- result[HistoryPage]{v, err}
	case *unsubscribeIntent:
		delete(a.subs, it.sub)
	case *stopIntent:
		a.stop()
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
		v, err := a.decide(it.runID, it.callID, it.approved)
		it.reply <- result[DecideResult]{v, err}
	case *approvalIntent:
		ch, err := a.onAwaitApproval(it.run, it.call)
		it.reply <- result[<-chan Decision]{ch, err}
	case *pausedIntent:
		it.reply <- a.onPaused(it.run, it.resumed)
	case *usageIntent:
		a.onUsage(it.run, it.usage)
	case *reasoningIntent:
		a.onReasoning(it.run, it)
	default:
		panic(fmt.Sprintf("conversation: unknown intent %T", it))
	}
}

// idle reports whether the actor holds nothing that needs it: no subscriber, no run, and
// no write still to be retried.
func (a *Actor) idle() bool {
	return a.run == nil && len(a.subs) == 0 && len(a.unsavedMsgs) == 0 && len(a.unsavedRuns) == 0
}

func (a *Actor) now() time.Time { return chat.Timestamp(a.cfg.Clock.Now()) }

func dbContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// load reads what the actor needs to know about its session. It is retried on the next
// intent when the database fails.
func (a *Actor) load() error {
	if a.loaded {
		return nil
	}
	ctx, cancel := dbContext()
	defer cancel()
	sess, err := a.cfg.Store.SessionGet(ctx, a.id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		a.session = nil
	case err != nil:
		return err
	default:
		a.session = &sess
	}
	maxPos, err := a.cfg.Store.MessagePositionMax(ctx, a.id)
	if err != nil {
		return err
	}
	a.nextPos = maxPos + 1
	a.loaded = true
	return nil
}

func (a *Actor) storageError(op string, err error) *Error {
	a.logger().Error().Err(err).Str("op", op).Msg("database call failed")
	return errorf(CodeStorage, "could not %s: the database is unavailable", op)
}

func (a *Actor) hello(req HelloRequest) (HelloResult, error) {
	if req.Subscriber == nil {
		return HelloResult{}, errorf(CodeBadRequest, "hello needs a subscriber")
	}
	if _, ok := a.subs[req.Subscriber]; ok {
		return HelloResult{}, errorf(CodeBadRequest, "already subscribed")
	}
	if err := a.load(); err != nil {
		return HelloResult{}, a.storageError("load the session", err)
	}
	if a.session == nil {
		ctx, cancel := dbContext()
		sess, err := a.cfg.Store.SessionCreate(ctx, chat.Session{ID: a.id, Owner: req.Owner, CreatedAt: a.now()})
		cancel()
		if err != nil {
			return HelloResult{}, a.storageError("create the session", err)
		}
		a.session = &sess
	}
	if a.session.Owner != req.Owner {
		return HelloResult{}, ErrNotYours
	}

	// Held text goes out first: the newcomer starts with all of it, and its snapshot or
	// replay ends at the seq that carried it.
	a.flushDelta()
	sub := req.Subscriber
	res := HelloResult{Epoch: a.epoch, LastSeq: a.seq}
	var c CatchUp
	if req.Epoch == a.epoch {
		if replay, size, ok := a.ring.since(req.LastSeq, a.seq); ok && size <= a.cfg.MaxReplayBytes {
			c.Resumed = &Resumed{SessionID: a.id, Epoch: a.epoch, LastSeq: req.LastSeq, RequestID: req.RequestID}
			c.Events = replay
			res.Resumed = true
			res.Replayed = len(replay)
		}
	}
	if !res.Resumed {
		snap, err := a.snapshot()
		if err != nil {
			return HelloResult{}, a.storageError("read the session", err)
		}
		snap.RequestID = req.RequestID
		c.Snapshot = &snap
	}
	// Counted before the frames are queued, so a client that has its catch-up finds it
	// counted.
	if res.Resumed {
		a.cfg.Metrics.catchUpReplay.Inc()
	} else {
		a.cfg.Metrics.catchUpSnapshot.Inc()
	}
	if !sub.CatchUp(c) {
		sub.Dropped(DropSlow)
		return res, nil
	}
	a.subs[sub] = struct{}{}
	return res, nil
}

// snapshot reads the newest messages and lays the live state over them: the database
// holds every message up to the current seq except the text of the open segment and the
// output of running tools, which only the actor has.
func (a *Actor) snapshot() (Snapshot, error) {
	ctx, cancel := dbContext()
	defer cancel()
	msgs, more, err := a.cfg.Store.MessagesBefore(ctx, a.id, 0, a.cfg.SnapshotMessages)
	if err != nil {
		return Snapshot{}, err
	}
	a.overlay(msgs)
	snap := Snapshot{SessionID: a.id, Epoch: a.epoch, LastSeq: a.seq, Messages: msgs, HasMore: more}
	if a.run != nil {
		r := a.run.info
		snap.ActiveRun = &r
	}
	return snap, nil
}

func (a *Actor) history(before int64, limit int) (HistoryPage, error) {
	if limit < 1 || limit > MaxHistoryLimit {
		return HistoryPage{}, errorf(CodeBadRequest, "limit must be between 1 and %d", MaxHistoryLimit)
	}
	if before < 0 {
		return HistoryPage{}, errorf(CodeBadRequest, "before must be a message position")
	}
	ctx, cancel := dbContext()
	defer cancel()
	msgs, more, err := a.cfg.Store.MessagesBefore(ctx, a.id, before, limit)
	if err != nil {
		return HistoryPage{}, a.storageError("read history", err)
	}
	a.overlay(msgs)
	return HistoryPage{Messages: msgs, HasMore: more}, nil
}

// publish numbers ev, keeps it for replay and offers it to every subscriber. Subscribers
// encode it in their format, once per format (Event.Encode caches). A subscriber that
// cannot take it is dropped; the others are unaffected. Any event but a delta publishes
// the held delta first, so events stay in order.
func (a *Actor) publish(e Event) {
	if e.Type != EventDelta {
		a.flushDelta()
	}
	a.seq++
	e.Seq = a.seq
	e.enc = new(encodings)
	ev := &e
	evicted := a.ring.evicted
	a.ring.push(ev)
	a.cfg.Metrics.eventsPublished.Inc()
	if n := a.ring.evicted - evicted; n > 0 {
		a.cfg.Metrics.ringEvictions.Add(float64(n))
	}
	for sub := range a.subs {
		if !sub.Deliver(ev) {
			delete(a.subs, sub)
			sub.Dropped(DropSlow)
			a.logger().Debug().Msg("dropped a subscriber that could not take an event")
		}
	}
}

func (a *Actor) stop() {
	if a.run != nil {
		a.finish(a.run, chat.RunInterrupted, &chat.ErrorInfo{
			Code:    CodeInterrupted,
			Message: "the server shut down during this run",
		}, chat.CancelShutdown)
	}
	for sub := range a.subs {
		delete(a.subs, sub)
		sub.Dropped(DropShutdown)
	}
	a.flushUnsaved()
	if n := len(a.unsavedMsgs) + len(a.unsavedRuns); n > 0 {
		// The next start-up marks the run interrupted and its open rows with it.
		a.logger().Error().Int("rows", n).Msg("stopping with writes the database did not take")
	}
	a.stopped = true
}

// scheduleRetry arms the retry of unsaved writes, backing off while they keep failing.
func (a *Actor) scheduleRetry() {
	if a.retryT.timer != nil || a.stopped {
		return
	}
	a.retryDelay = min(max(2*a.retryDelay, retryMin), retryMax)
	a.arm(&a.retryT, a.retryDelay)
}

// flushUnsaved retries the writes that failed. It stops at the first failure (the
// database is likely still down) and tries again later.
func (a *Actor) flushUnsaved() {
	retry := func(op string, err error) bool {
		if err == nil {
			return true
		}
		if errors.Is(err, store.ErrNotFound) {
			a.logger().Error().Err(err).Str("op", op).Msg("a row to update is missing; giving up on it")
			return true
		}
		if errors.Is(err, store.ErrStale) {
			// Retrying cannot help: the row has moved on, perhaps by this very write when an
			// earlier attempt committed but reported an error.
			a.logger().Warn().Err(err).Str("op", op).Msg("a row to update has moved on; giving up on it")
			return true
		}
		a.logger().Warn().Err(err).Str("op", op).Dur("next_retry", min(2*a.retryDelay, retryMax)).Msg("database write still failing")
		a.scheduleRetry()
		return false
	}
	for id, m := range a.unsavedMsgs {
		ctx, cancel := dbContext()
		err := a.cfg.Store.MessageUpdate(ctx, m, chat.MessageStreaming)
		cancel()
		if !retry("store a message", err) {
			return
		}
		delete(a.unsavedMsgs, id)
	}
	for id, r := range a.unsavedRuns {
		ctx, cancel := dbContext()
		err := a.cfg.Store.RunUpdate(ctx, r, chat.ActiveRunStatuses()...)
		cancel()
		if !retry("store a run", err) {
			return
		}
		delete(a.unsavedRuns, id)
	}
	a.retryDelay = 0
}

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}
