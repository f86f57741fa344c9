package conversation

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// storeTimeout bounds each database call the journal makes, so a hung database cannot
// freeze a session forever.
const storeTimeout = 10 * time.Second

// A write that failed is retried after retryMin, doubling up to retryMax.
const (
	retryMin = time.Second
	retryMax = 30 * time.Second
)

// journal is the only way an actor reaches the database: every read and write of its
// session goes through it, in the actor's order. It owns what persistence needs beyond a
// statement:
//
//   - message positions: the next one, read again when an insert's outcome is unknown;
//   - guarded updates: a run is written only while it is active, a message only while it
//     is streaming, so a late write cannot rewrite what has ended; a refused write is
//     logged and counted (chatd_writes_refused_total), never retried;
//   - retries: an update the database did not take is kept, newest version per row, and
//     retried in the order it was made, backing off while the database is down;
//   - the overlay: rows read back show what clients were told, including kept updates;
//   - lost inserts: an insert whose answer was lost may have committed a row the actor
//     does not track; the end of its run settles such rows (retried like an update, and
//     never over a row whose own final update is still to be stored);
//   - a run start whose answer was lost: it is looked up before it is called failed.
//
// It is where the session lease's fence and write-behind will go: callers only say what
// to store, never how. The journal belongs to its actor's goroutine and is not safe for
// concurrent use.
type journal struct {
	st      Store
	session uuid.UUID
	metrics *Metrics
	log     func() *zerolog.Logger
	// retry arms the actor's retry timer, which calls flush, unless it is armed already
	// or the actor is stopping; it reports whether it armed it.
	retry func(time.Duration) bool

	loaded  bool
	nextPos int64

	unsaved    []pendingWrite     // oldest first; one entry per row
	lost       map[uuid.UUID]bool // runs with an insert whose outcome is unknown
	retryDelay time.Duration

	// The session's lease (nil lease: none is held, the process is alone on its
	// database): token is what it was acquired with (0 until then), and the fence of
	// every write. fencedOut is set once a write was refused by the fence: the actor
	// then stops, and no further write reaches the database.
	lease     *LeaseConfig
	now       func() time.Time
	token     *atomic.Int64
	fencedOut bool
}

// pendingWrite is a write the database has not taken: the newest version of a message
// or a run, or the settling of a run's stray rows.
type pendingWrite struct {
	msg    *chat.Message
	run    *chat.Run
	settle *settleWrite
}

type settleWrite struct {
	runID  uuid.UUID
	status chat.MessageStatus
	now    time.Time
}

// writeKey names what a pending write is about: one per row, and one settle per run.
type writeKey struct {
	table string
	id    uuid.UUID
}

func (w pendingWrite) key() writeKey {
	switch {
	case w.msg != nil:
		return writeKey{"messages", w.msg.ID}
	case w.run != nil:
		return writeKey{"runs", w.run.ID}
	}
	return writeKey{"settle", w.settle.runID}
}

func newJournal(st Store, session uuid.UUID, metrics *Metrics, log func() *zerolog.Logger, retry func(time.Duration) bool) *journal {
	j := &journal{session: session, metrics: metrics, log: log, retry: retry}
	j.st = fencing{st, j}
	return j
}

// ctx bounds one database call and carries the lease's fence, when one is held.
func (j *journal) ctx() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	if j.token != nil {
		if t := j.token.Load(); t != 0 {
			ctx = store.WithFence(ctx, t)
		}
	}
	return ctx, cancel
}

// pending reports whether writes wait for a retry.
func (j *journal) pending() bool { return len(j.unsaved) > 0 }

// load reads the session (nil when it does not exist) and, once, the next message
// position. It is read again after an insert whose outcome is unknown. With leases, the
// first load acquires the session's lease: *ElsewhereError when another node holds it.
func (j *journal) load() (*chat.Session, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	var sess chat.Session
	var err error
	if j.lease != nil && j.token.Load() == 0 {
		sess, err = j.acquire(ctx)
	} else {
		sess, err = j.st.SessionGet(ctx, j.session)
	}
	var found *chat.Session
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		found = &sess
	}
	if !j.loaded {
		if err := j.loadPosition(ctx); err != nil {
			return nil, err
		}
	}
	return found, nil
}

func (j *journal) loadPosition(ctx context.Context) error {
	maxPos, err := j.st.MessagePositionMax(ctx, j.session)
	if err != nil {
		return err
	}
	j.nextPos = maxPos + 1
	j.loaded = true
	return nil
}

// position returns the position the next message will take.
func (j *journal) position() int64 { return j.nextPos }

// createSession stores a new session unless one with its id exists, and returns the
// stored one: compare its owner. With leases it then acquires the new session's lease.
func (j *journal) createSession(sess chat.Session) (chat.Session, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	created, err := j.st.SessionCreate(ctx, sess)
	if err != nil || j.lease == nil {
		return created, err
	}
	return j.acquire(ctx)
}

// acquire takes the session's lease: store.ErrNotFound for a session that does not
// exist, *ElsewhereError when another node holds a live lease.
func (j *journal) acquire(ctx context.Context) (chat.Session, error) {
	now := j.now()
	prev, _ := j.st.LeaseGet(ctx, j.session) // only to count takeovers; the acquire decides
	sess, l, err := j.st.LeaseAcquire(ctx, j.session, j.lease.Node(), j.lease.Addr(), now, j.lease.TTL)
	if err != nil {
		return chat.Session{}, err
	}
	node := j.lease.Node()
	if l.Node != node {
		return chat.Session{}, &ElsewhereError{Lease: l}
	}
	if prev.Node != "" && prev.Node != node {
		j.metrics.leaseTakeover.Inc()
		j.log().Warn().Str("from_node", prev.Node).Int64("token", l.Token).Msg("took the session over from a node whose lease expired")
	} else {
		j.metrics.leaseAcquired.Inc()
	}
	j.token.Store(l.Token)
	return sess, nil
}

// releaseLease gives the session's lease back, when the journal holds it: the actor has
// stopped, and another node may take the session at once.
func (j *journal) releaseLease() {
	if j.lease == nil || j.fencedOut {
		return
	}
	t := j.token.Swap(0)
	if t == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := j.st.LeaseRelease(ctx, j.session, j.lease.Node(), t); err != nil {
		// It expires on its own, a TTL from its last renewal.
		j.log().Warn().Err(err).Msg("could not release the session's lease")
	}
}

// messagesBefore reads up to limit messages before position before (0: the newest), as
// clients were told of them: kept updates replace what the database holds.
func (j *journal) messagesBefore(before int64, limit int) ([]chat.Message, bool, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	msgs, more, err := j.st.MessagesBefore(ctx, j.session, before, limit)
	if err != nil {
		return nil, false, err
	}
	j.overlay(msgs)
	return msgs, more, nil
}

// messagesByRun reads a run's messages, as clients were told of them.
func (j *journal) messagesByRun(runID uuid.UUID) ([]chat.Message, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	msgs, err := j.st.MessagesByRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	j.overlay(msgs)
	return msgs, nil
}

func (j *journal) overlay(msgs []chat.Message) {
	if len(j.unsaved) == 0 {
		return
	}
	for i := range msgs {
		if w, ok := j.find(writeKey{"messages", msgs[i].ID}); ok {
			msgs[i] = *w.msg
		}
	}
}

// runGet reads a run, as clients were told of it.
func (j *journal) runGet(id uuid.UUID) (chat.Run, error) {
	if w, ok := j.find(writeKey{"runs", id}); ok {
		return *w.run, nil
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunGet(ctx, id)
}

// runLatest reads the session's newest run, as clients were told of it; store.ErrNotFound
// when it has none.
func (j *journal) runLatest() (chat.Run, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	r, err := j.st.RunLatest(ctx, j.session)
	if err != nil {
		return chat.Run{}, err
	}
	if w, ok := j.find(writeKey{"runs", r.ID}); ok {
		return *w.run, nil
	}
	return r, nil
}

// deleteEmpty removes a streaming segment that holds no text, and reports whether it did.
func (j *journal) deleteEmpty(id uuid.UUID) (bool, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.MessageDeleteEmpty(ctx, id)
}

// moveRun stores a run that leaves one of the statuses from (an ended run continued, a
// dismissed one). Unlike updateRun it is not kept for a retry: its caller answers a
// person, who can try again.
func (j *journal) moveRun(r chat.Run, from ...chat.RunStatus) error {
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunUpdate(ctx, r, from...)
}

// runByRequest finds the session's run for requestID, also one whose latest state is
// still to be stored. It returns store.ErrNotFound when there is none.
func (j *journal) runByRequest(requestID string) (chat.Run, error) {
	for _, w := range j.unsaved {
		if w.run != nil && w.run.RequestID == requestID {
			return *w.run, nil
		}
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunByRequest(ctx, j.session, requestID)
}

// startRun stores a new run with its user message, which takes the next position, unless
// the session's owner has maxActive active runs (0: no limit). An error wrapping
// store.ErrConflict means the session has a run for this requestId already,
// store.ErrRunLimit that the owner is at the limit; any other error means nothing was
// stored (an answer lost after a commit is found out and not reported).
func (j *journal) startRun(run chat.Run, user chat.Message, maxActive int) error {
	ctx, cancel := j.ctx()
	err := j.st.RunStart(ctx, run, user, maxActive)
	cancel()
	if errors.Is(err, store.ErrRunLimit) {
		return err // an answer: nothing was stored, no position moved
	}
	if err != nil && !errors.Is(err, store.ErrConflict) {
		// The statement may have committed before its answer was lost.
		if prev, e := j.runByRequest(run.RequestID); e == nil && prev.ID == run.ID {
			err = nil
		}
	}
	if err != nil {
		// Whatever happened, the next message's position must be read again.
		j.loaded = false
		return err
	}
	j.nextPos++
	return nil
}

// startRetry stores a run that retries run.RetryOf (it has no user message of its own).
// Errors are those of startRun.
func (j *journal) startRetry(run chat.Run, maxActive int) error {
	ctx, cancel := j.ctx()
	err := j.st.RunStartRetry(ctx, run, maxActive)
	cancel()
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrRunLimit) {
		if prev, e := j.runByRequest(run.RequestID); e == nil && prev.ID == run.ID {
			err = nil
		}
	}
	return err
}

// reload forgets the next position, for when rows were stored behind the journal's back
// (a run start reported as failed that committed).
func (j *journal) reload() { j.loaded = false }

// insert stores a new message of run runID at the next position. A failure may still
// have committed: the next position is read again, and settle ends the rows the run may
// have left behind.
func (j *journal) insert(runID uuid.UUID, m chat.Message) error {
	ctx, cancel := j.ctx()
	defer cancel()
	if err := j.st.MessageInsert(ctx, m); err != nil {
		j.loaded = false
		if j.lost == nil {
			j.lost = make(map[uuid.UUID]bool)
		}
		j.lost[runID] = true
		return err
	}
	j.nextPos++
	return nil
}

// update stores a streaming message's new state (still streaming, or its end). When the
// database fails, the state is kept and retried: clients have been, or are about to be,
// told of it. A message that is no longer streaming is left as it is (refused).
func (j *journal) update(m chat.Message) error {
	return j.write(pendingWrite{msg: &m})
}

// updateRun stores an active run's new state (another active status, or its end). A run
// that has ended already is left as it is (refused); failures are kept and retried.
func (j *journal) updateRun(r chat.Run) error {
	return j.write(pendingWrite{run: &r})
}

func (j *journal) write(w pendingWrite) error {
	err := j.exec(w)
	switch {
	case err == nil || j.refused(w, err):
		j.forget(w.key())
	default:
		j.keep(w)
	}
	return err
}

func (j *journal) exec(w pendingWrite) error {
	ctx, cancel := j.ctx()
	defer cancel()
	switch {
	case w.msg != nil:
		return j.st.MessageUpdate(ctx, *w.msg, chat.MessageStreaming)
	case w.run != nil:
		return j.st.RunUpdate(ctx, *w.run, chat.ActiveRunStatuses()...)
	}
	// Messages whose final state is still to be stored are not settled: their own
	// update would then be refused, and what clients were told would be lost.
	var kept []uuid.UUID
	for _, k := range j.unsaved {
		if k.msg != nil {
			kept = append(kept, k.msg.ID)
		}
	}
	if _, err := j.st.MessagesSettleRun(ctx, w.settle.runID, w.settle.status, w.settle.now, kept...); err != nil {
		return err
	}
	delete(j.lost, w.settle.runID)
	return nil
}

// refused reports whether err means the database will never take w (the row is gone,
// or has moved past the states w may be written from), counting and logging it: a
// retry cannot help, and the row is left as it is.
func (j *journal) refused(w pendingWrite, err error) bool {
	k := w.key()
	if k.table == "settle" {
		return false // settling refuses nothing: it only ends what still streams
	}
	switch {
	case errors.Is(err, store.ErrFenced):
		return true // counted by fencing; the actor stops
	case errors.Is(err, store.ErrStale):
		j.metrics.writesRefused[k.table].Inc()
		j.log().Warn().Err(err).Str("table", k.table).Str("id", k.id.String()).Msg("a write was refused: the row has moved on")
		return true
	case errors.Is(err, store.ErrNotFound):
		j.metrics.writesRefused[k.table].Inc()
		j.log().Error().Err(err).Str("table", k.table).Str("id", k.id.String()).Msg("a row to update is missing; giving up on it")
		return true
	}
	return false
}

func (j *journal) find(k writeKey) (pendingWrite, bool) {
	for _, w := range j.unsaved {
		if w.key() == k {
			return w, true
		}
	}
	return pendingWrite{}, false
}

// keep queues w for a retry, replacing an older version of its row.
func (j *journal) keep(w pendingWrite) {
	j.forget(w.key())
	j.unsaved = append(j.unsaved, w)
	j.scheduleRetry()
}

func (j *journal) forget(k writeKey) {
	for i, w := range j.unsaved {
		if w.key() == k {
			j.unsaved = append(j.unsaved[:i], j.unsaved[i+1:]...)
			return
		}
	}
}

// settle ends the rows of run runID that an insert with a lost answer may have left
// streaming, giving them status; rows whose final state the journal still keeps are
// left to their own update. It does nothing for a run whose inserts all answered. A
// failure is kept and retried, after the writes kept before it.
func (j *journal) settle(runID uuid.UUID, status chat.MessageStatus, now time.Time) error {
	if !j.lost[runID] {
		return nil
	}
	return j.write(pendingWrite{settle: &settleWrite{runID, status, now}})
}

// discard forgets the writes kept for a retry: their session was deleted.
func (j *journal) discard() {
	j.unsaved = nil
	j.retryDelay = 0
}

// continueRun stores a run a person continued (see moveRun), marking its session active
// in the same statement, unless the session's owner has maxActive active runs
// (store.ErrRunLimit; 0 is no limit).
func (j *journal) continueRun(r chat.Run, maxActive int, from ...chat.RunStatus) error {
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunContinue(ctx, r, maxActive, from...)
}

// scheduleRetry arms the retry of kept writes, backing off while they keep failing.
func (j *journal) scheduleRetry() {
	next := min(max(2*j.retryDelay, retryMin), retryMax)
	if j.retry(next) {
		j.retryDelay = next
	}
}

// flush retries the kept writes, oldest first. It stops at the first failure (the
// database is likely still down) and schedules the next try.
func (j *journal) flush() {
	for len(j.unsaved) > 0 {
		w := j.unsaved[0]
		if err := j.exec(w); err != nil && !j.refused(w, err) {
			j.log().Warn().Err(err).Str("table", w.key().table).Str("id", w.key().id.String()).Dur("next_retry", min(2*j.retryDelay, retryMax)).Msg("database write still failing")
			j.scheduleRetry()
			return
		}
		j.unsaved = j.unsaved[1:]
	}
	j.unsaved = nil
	j.retryDelay = 0
}
