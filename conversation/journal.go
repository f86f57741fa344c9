package conversation

import (
	"context"
	"errors"
	"fmt"
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
//   - message positions: the next one, read again when positions moved under it;
//   - guarded updates: a run is written only while it is active, a message only while it
//     is streaming, so a late write cannot rewrite what has ended; a refused write is
//     logged and counted (chatd_writes_refused_total), never retried;
//   - retries: a write the database did not take stays queued and is retried, in the
//     order it was made, backing off while the database is down (an insert retried after
//     its answer was lost finds its own row, and counts as stored);
//   - the overlay: rows read back show what clients were told, including queued writes;
//   - settling: the rows of a run no agent drives are ended by one statement (never over
//     a row whose own final update is still to be stored);
//   - a run start whose answer was lost: it is looked up before it is called failed;
//   - write-behind: a run's writes after its start are queued and stored in order by the
//     session's writer goroutine (writebehind.go); reads lay the queue over the database;
//   - memory: the session's newest messages and latest run, kept as they are written
//     (recent.go).
//
// Callers only say what to store, never how. The journal belongs to its actor's
// goroutine and is not safe for concurrent use, except what writebehind.go shares with
// the writer.
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

	q          writeQueue         // write-behind: see writebehind.go
	recent     recentMessages     // the newest messages, in memory: see recent.go
	signal     chan struct{}      // the writer has news for the actor (buffered, 1)
	lost       map[uuid.UUID]bool // runs whose rows may include ones the actor does not track
	retryDelay time.Duration

	// The session's lease (nil lease: none is held, the process is alone on its
	// database): token is what it was acquired with (0 until then), and the fence of
	// every write. fencedOut is set once a write was refused by the fence: the actor
	// then stops, and no further write reaches the database.
	lease     *LeaseConfig
	now       func() time.Time
	token     *atomic.Int64
	fencedOut atomic.Bool
}

// errFencedOut is what a write gets once the journal is fenced out.
var errFencedOut = store.ErrFenced

// pendingWrite is a write the database has not taken yet: a message's insert, the newest
// version of a message or a run, or the settling of a run's stray rows.
type pendingWrite struct {
	msg    *chat.Message
	insert bool // msg is new: inserted, not updated
	run    *chat.Run
	settle *settleWrite
	// n numbers the write in its queue; retried marks one tried before (an insert that
	// then meets its own row committed it).
	n       uint64
	retried bool
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
	j := &journal{session: session, metrics: metrics, log: log, retry: retry, signal: make(chan struct{}, 1)}
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

// load reads the session (nil when it does not exist) and, once, the next message
// position, in one statement (store.SessionOpen). It is read again after an insert
// whose outcome is unknown. With leases, the first load acquires the session's lease in
// the same statement: *ElsewhereError when another node holds it.
func (j *journal) load() (*chat.Session, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	var req store.OpenRequest
	if j.lease != nil && j.token.Load() == 0 {
		req = j.openRequest()
	}
	queued := j.queued()
	o, err := j.st.SessionOpen(ctx, j.session, req)
	if err != nil {
		return nil, err
	}
	if o.Found && req.Node != "" {
		if err := j.took(req.Node, o); err != nil {
			return nil, err
		}
	}
	if !j.loaded {
		j.nextPos = max(o.MaxPosition, maxQueuedPosition(queued)) + 1
		j.loaded = true
	}
	if !o.Found {
		return nil, nil
	}
	return &o.Session, nil
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
	req := j.openRequest()
	o, err := j.st.SessionOpen(ctx, j.session, req)
	if err != nil {
		return chat.Session{}, err
	}
	if !o.Found {
		return chat.Session{}, fmt.Errorf("acquire session %s: %w", j.session, store.ErrNotFound)
	}
	if err := j.took(req.Node, o); err != nil {
		return chat.Session{}, err
	}
	return o.Session, nil
}

// openRequest is how the journal opens its session with leases: for this node, for a
// TTL by the database's clock.
func (j *journal) openRequest() store.OpenRequest {
	return store.OpenRequest{Node: j.lease.Node(), Addr: j.lease.Addr(), TTL: j.lease.TTL}
}

// took keeps the token of the lease SessionOpen acquired for node, and counts how: a
// takeover when another node held it. Not acquired, it is *ElsewhereError: another node
// holds a live lease. A tombstone is never acquired, and needs no lease: the actor
// answers that it was deleted, and writes nothing.
func (j *journal) took(node string, o store.Opened) error {
	if !o.Acquired {
		if o.Session.DeletedAt != nil {
			return nil
		}
		return &ElsewhereError{Lease: o.Lease}
	}
	if o.PrevNode != "" && o.PrevNode != node {
		j.metrics.leaseTakeover.Inc()
		j.log().Warn().Str("from_node", o.PrevNode).Int64("token", o.Lease.Token).Msg("took the session over from a node whose lease expired")
	} else {
		j.metrics.leaseAcquired.Inc()
	}
	j.token.Store(o.Lease.Token)
	return nil
}

// releaseLease gives the session's lease back, when the journal holds it: the actor has
// stopped, and another node may take the session at once.
func (j *journal) releaseLease() {
	if j.lease == nil || j.fencedOut.Load() {
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
	msgs, more, err := j.historyReader(before, limit)()
	if err == nil && before == 0 {
		j.recent.fill(msgs, more)
	}
	return msgs, more, err
}

// newest returns the newest limit messages as clients were told of them, from memory
// when it holds them (see recent.go), else from the database.
func (j *journal) newest(limit int) ([]chat.Message, bool, error) {
	if msgs, more, ok := j.recent.newest(limit); ok {
		return msgs, more, nil
	}
	return j.messagesBefore(0, limit)
}

// historyReader returns a read of messagesBefore(before, limit) that any goroutine may
// make: the queued writes it lays over the database are those queued now.
func (j *journal) historyReader(before int64, limit int) func() ([]chat.Message, bool, error) {
	queued := j.queued()
	return func() ([]chat.Message, bool, error) {
		ctx, cancel := j.ctx()
		defer cancel()
		msgs, more, err := j.st.MessagesBefore(ctx, j.session, before, limit)
		if err != nil {
			return nil, false, err
		}
		msgs = overlayMessages(msgs, queued, func(m chat.Message) bool { return before == 0 || m.Position < before })
		if len(msgs) > limit {
			msgs, more = msgs[len(msgs)-limit:], true
		}
		return msgs, more, nil
	}
}

// messagesByRun reads a run's messages, as clients were told of them.
func (j *journal) messagesByRun(runID uuid.UUID) ([]chat.Message, error) {
	queued := j.queued()
	ctx, cancel := j.ctx()
	defer cancel()
	msgs, err := j.st.MessagesByRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return overlayMessages(msgs, queued, func(m chat.Message) bool { return m.RunID != nil && *m.RunID == runID }), nil
}

// runGet reads a run, as clients were told of it.
func (j *journal) runGet(id uuid.UUID) (chat.Run, error) {
	if r, ok := queuedRun(j.queued(), id); ok {
		return r, nil
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunGet(ctx, id)
}

// runLatest reads the session's newest run, as clients were told of it; store.ErrNotFound
// when it has none.
func (j *journal) runLatest() (chat.Run, error) {
	queued := j.queued()
	ctx, cancel := j.ctx()
	defer cancel()
	r, err := j.st.RunLatest(ctx, j.session)
	if errors.Is(err, store.ErrNotFound) {
		j.recent.setLatest(nil)
	}
	if err != nil {
		return chat.Run{}, err
	}
	if q, ok := queuedRun(queued, r.ID); ok {
		r = q
	}
	j.recent.setLatest(&r)
	return r, nil
}

// latestRun is runLatest, from memory once the journal knows the session's latest run.
func (j *journal) latestRun() (chat.Run, error) {
	if j.recent.latestKnown {
		if j.recent.latest == nil {
			return chat.Run{}, store.ErrNotFound
		}
		return *j.recent.latest, nil
	}
	return j.runLatest()
}

// deleteEmpty removes a streaming segment that holds no text, and reports whether it
// did, after the writes queued before it.
func (j *journal) deleteEmpty(id uuid.UUID) (bool, error) {
	j.drain()
	ctx, cancel := j.ctx()
	defer cancel()
	deleted, err := j.st.MessageDeleteEmpty(ctx, id)
	if deleted {
		j.recent.remove(id)
	}
	return deleted, err
}

// moveRun stores a run that leaves one of the statuses from (an ended run continued, a
// dismissed one), after the writes queued before it. Unlike updateRun it is not kept
// for a retry: its caller answers a person, who can try again.
func (j *journal) moveRun(r chat.Run, from ...chat.RunStatus) error {
	j.drain()
	ctx, cancel := j.ctx()
	defer cancel()
	err := j.st.RunUpdate(ctx, r, from...)
	if err == nil {
		j.recent.putRun(r)
	} else {
		j.recent.latestKnown = false
	}
	return err
}

// runByRequest finds the session's run for requestID, also one whose latest state is
// still to be stored. It returns store.ErrNotFound when there is none.
func (j *journal) runByRequest(requestID string) (chat.Run, error) {
	queued := j.queued()
	for i := len(queued) - 1; i >= 0; i-- {
		if r := queued[i].run; r != nil && r.RequestID == requestID {
			return *r, nil
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
// stored (an answer lost after a commit is found out and not reported). It is made
// after the writes queued before it, and waited for.
func (j *journal) startRun(run chat.Run, user chat.Message, maxActive int) error {
	j.drain()
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
		j.recent.forget()
		return err
	}
	j.nextPos++
	j.recent.add(user)
	j.recent.setLatest(&run)
	return nil
}

// startRetry stores a run that retries run.RetryOf (it has no user message of its own).
// Errors are those of startRun.
func (j *journal) startRetry(run chat.Run, maxActive int) error {
	j.drain()
	ctx, cancel := j.ctx()
	err := j.st.RunStartRetry(ctx, run, maxActive)
	cancel()
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrRunLimit) {
		if prev, e := j.runByRequest(run.RequestID); e == nil && prev.ID == run.ID {
			err = nil
		}
	}
	j.recent.forget() // the retried run's answers are superseded by the statement
	if err == nil {
		j.recent.setLatest(&run)
	}
	return err
}

// reload forgets the next position, for when rows were stored behind the journal's back
// (a run start reported as failed that committed).
func (j *journal) reload() {
	j.loaded = false
	j.recent.forget()
}

// insert stores a new message at the next position, behind (see writebehind.go). A
// failure is kept and retried like an update; an insert the database refuses is
// reported to the actor (refusedInsert).
func (j *journal) insert(m chat.Message) error {
	if err := j.enqueue(pendingWrite{msg: &m, insert: true}); err != nil {
		return err
	}
	j.nextPos++
	j.recent.add(m)
	return nil
}

// update stores a streaming message's new state (still streaming, or its end), behind:
// clients are told at once, the database when the session's writer gets to it. When the
// database fails, the state is kept and retried. A message that is no longer streaming
// is left as it is (refused).
func (j *journal) update(m chat.Message) error {
	j.recent.put(m)
	return j.enqueue(pendingWrite{msg: &m})
}

// updateRun stores an active run's new state (another active status, or its end),
// behind. A run that has ended already is left as it is (refused); failures are kept
// and retried.
func (j *journal) updateRun(r chat.Run) error {
	j.recent.putRun(r)
	return j.enqueue(pendingWrite{run: &r})
}

// exec makes one write. keep names the messages whose own writes are queued behind it,
// which a settle leaves alone. It runs on the writer goroutine: it reads nothing the
// actor owns.
func (j *journal) exec(w pendingWrite, keep []uuid.UUID) error {
	ctx, cancel := j.ctx()
	defer cancel()
	switch {
	case w.msg != nil && w.insert:
		err := j.st.MessageInsert(ctx, *w.msg)
		if w.retried && errors.Is(err, store.ErrConflict) {
			return nil // the earlier try committed before its answer was lost
		}
		return err
	case w.msg != nil:
		return j.st.MessageUpdate(ctx, *w.msg, chat.MessageStreaming)
	case w.run != nil:
		return j.st.RunUpdate(ctx, *w.run, chat.ActiveRunStatuses()...)
	}
	// Messages whose final state is still to be stored are not settled: their own
	// update would then be refused, and what clients were told would be lost.
	_, err := j.st.MessagesSettleRun(ctx, w.settle.runID, w.settle.status, w.settle.now, keep...)
	return err
}

// refused reports whether err means the database will never take w (the row is gone,
// or has moved past the states w may be written from; for an insert, the session is
// gone or its position taken), counting and logging it: a retry cannot help, and the
// row is left as it is. It runs on the writer goroutine.
func (j *journal) refused(w pendingWrite, err error) bool {
	k := w.key()
	if k.table == "settle" {
		return false // settling refuses nothing: it only ends what still streams
	}
	switch {
	case errors.Is(err, store.ErrFenced):
		return true // counted by fencing; the actor stops
	case errors.Is(err, store.ErrStale), w.insert && errors.Is(err, store.ErrConflict):
		j.metrics.writesRefused[k.table].Inc()
		j.log().Warn().Err(err).Str("table", k.table).Str("id", k.id.String()).Msg("a write was refused: the row has moved on")
		return true
	case errors.Is(err, store.ErrNotFound):
		j.metrics.writesRefused[k.table].Inc()
		j.log().Error().Err(err).Str("table", k.table).Str("id", k.id.String()).Msg("a row to write is missing; giving up on it")
		return true
	}
	return false
}

// settle ends the rows of run runID that an insert with a lost answer may have left
// streaming, giving them status; rows whose final state the journal still keeps are
// left to their own update. It does nothing for a run whose inserts all answered. A
// failure is kept and retried, after the writes queued before it.
func (j *journal) settle(runID uuid.UUID, status chat.MessageStatus, now time.Time) error {
	if !j.lost[runID] {
		return nil
	}
	delete(j.lost, runID) // from now on the queue keeps it until it is stored
	j.recent.forget()     // it ends rows the actor does not track
	return j.enqueue(pendingWrite{settle: &settleWrite{runID, status, now}})
}

// continueRun stores a run a person continued (see moveRun), marking its session active
// in the same statement, unless the session's owner has maxActive active runs
// (store.ErrRunLimit; 0 is no limit).
func (j *journal) continueRun(r chat.Run, maxActive int, from ...chat.RunStatus) error {
	j.drain()
	ctx, cancel := j.ctx()
	defer cancel()
	err := j.st.RunContinue(ctx, r, maxActive, from...)
	if err == nil {
		j.recent.putRun(r)
	} else {
		j.recent.latestKnown = false
	}
	return err
}

// scheduleRetry arms the retry of kept writes, backing off while they keep failing.
func (j *journal) scheduleRetry() {
	next := min(max(2*j.retryDelay, retryMin), retryMax)
	if j.retry(next) {
		j.retryDelay = next
	}
}
