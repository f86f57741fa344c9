package conversation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/journal"
	"github.com/chatd/chatd/store"
)

// sessionJournal is the only way an actor reaches the database: every read and write of
// its session goes through it, in the actor's order. Writes go to the session's queue in
// the journal service (package journal: order, fences, retries, failures, the stream
// log); what is left here is what the actor's view of its session needs:
//
//   - message positions: the next one, read again when positions moved under it;
//   - durability classes: a write is queued behind the stream, awaited by the step that
//     needs it (awaitStored), or made at once after the queued ones (startRun, moveRun);
//   - the overlay: rows read back show what clients were told, including queued writes;
//   - settling: the rows of a run no agent drives are ended by one statement (never over
//     a row whose own final update is still to be stored);
//   - a run start whose answer was lost: it is looked up before it is called failed;
//   - memory: the session's newest messages and latest run, kept as they are written
//     (recent.go).
//
// Callers only say what to store, never how. It belongs to its actor's goroutine and is
// not safe for concurrent use.
type sessionJournal struct {
	st      Store
	session uuid.UUID
	metrics *Metrics
	log     func() *zerolog.Logger
	w       *journal.Writer
	q       *journal.Queue

	loaded  bool
	nextPos int64
	// leaf is the active path's last message as clients were told (nil: none): read
	// with the session, then followed as messages are written under it and branches
	// are selected. leafKids are its children (read once per leaf, leafKidsKnown).
	leaf          *uuid.UUID
	leafKids      []uuid.UUID
	leafKidsKnown bool

	recent recentMessages     // the newest messages, in memory: see recent.go
	lost   map[uuid.UUID]bool // runs whose rows may include ones the actor does not track
	// requests are the request ids of the session's runs, when requestsKnown (read with
	// the session), as their hashes (requestHash), sorted: an idle session keeps 8 bytes
	// a run instead of a map of strings. requestsComplete: all of them, so one not there
	// is new. (A hash that matches another id's costs a statement: see Actor.send.)
	requests         []uint64
	requestsKnown    bool
	requestsComplete bool
	// agentState is the state an agent last reported in the session, when
	// agentStateKnown: reported in this journal's life, so at least as new as what the
	// database holds.
	agentState      json.RawMessage
	agentStateKnown bool

	// The session's lease (nil lease: none is held, the process is alone on its
	// database): token is what it was acquired with (0 until then), mirrored for the
	// hub's renewals; the queue fences every write with it.
	lease *LeaseConfig
	token *atomic.Int64
}

// notify is called after each signal of the queue (journal.QueueConfig.Notify).
func newSessionJournal(st Store, w *journal.Writer, session uuid.UUID, metrics *Metrics, log func() *zerolog.Logger, lease *LeaseConfig, notify func()) *sessionJournal {
	return &sessionJournal{
		st: st, session: session, metrics: metrics, log: log, w: w, lease: lease,
		q: w.Open(journal.QueueConfig{Session: session, Store: st, Leased: lease != nil, Log: log, Notify: notify}),
	}
}

// ctx bounds one database call that is not a write of the queue: a read, or the lease's
// own statements.
func (j *sessionJournal) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), journal.DefaultStatementTimeout)
}

// load reads the session (nil when it does not exist) and, once, the next message
// position, in one statement (store.SessionOpen). It is read again after an insert
// whose outcome is unknown. With leases, the first load acquires the session's lease in
// the same statement: *ElsewhereError when another node holds it. With owner (a hello's
// caller, checked) a session of another user is read, not acquired: its actor answers
// that it is not the caller's, and goes.
func (j *sessionJournal) load(owner string, check bool) (*chat.Session, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	req := store.OpenRequest{Owner: owner, CheckOwner: check, RequestIDs: maxKnownRequests + 1}
	if j.lease != nil && j.token.Load() == 0 {
		req.Node, req.Addr, req.TTL = j.lease.Node(), j.lease.Addr(), j.lease.TTL
	}
	queued := j.q.Queued()
	o, err := j.st.SessionOpen(ctx, j.session, req)
	if err != nil {
		return nil, err
	}
	if o.Found && req.Node != "" && !(check && o.Session.Owner != owner) {
		if err := j.took(req.Node, o); err != nil {
			return nil, err
		}
	}
	if !j.loaded {
		j.agentState, j.agentStateKnown = nil, false // another process may have run it
		j.nextPos = max(o.MaxPosition, maxQueuedPosition(queued)) + 1
		leaf := leafOver(o.Session.ActiveLeaf, queued)
		j.setLeaf(leaf, nil, !o.LeafHasChildren && sameID(leaf, o.Session.ActiveLeaf))
		j.loaded = true
	}
	if o.Found && !(check && o.Session.Owner != owner) {
		j.knowRequests(o.RequestIDs, queued)
	}
	if !o.Found {
		return nil, nil
	}
	// A copy: a pointer into o would keep all of it (the request ids read) for as long as
	// the actor keeps its session.
	sess := o.Session
	return &sess, nil
}

// position returns the position the next message will take.
func (j *sessionJournal) position() int64 { return j.nextPos }

// createSession stores a new session unless one with its id exists, and returns the
// stored one: compare its owner. With leases it then acquires the new session's lease.
func (j *sessionJournal) createSession(sess chat.Session, maxPerOwner int) (chat.Session, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	created, err := j.st.SessionCreateLimited(ctx, sess, maxPerOwner)
	if err == nil && created.Owner == sess.Owner && created.CreatedAt.Equal(chat.Timestamp(sess.CreatedAt)) {
		// This one made it: it has no run, so every request id is new.
		j.requests, j.requestsKnown, j.requestsComplete = nil, true, true
	}
	if err != nil || j.lease == nil {
		return created, err
	}
	return j.acquire(ctx)
}

// acquire takes the session's lease: store.ErrNotFound for a session that does not
// exist, *ElsewhereError when another node holds a live lease.
func (j *sessionJournal) acquire(ctx context.Context) (chat.Session, error) {
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
func (j *sessionJournal) openRequest() store.OpenRequest {
	return store.OpenRequest{Node: j.lease.Node(), Addr: j.lease.Addr(), TTL: j.lease.TTL}
}

// took keeps the token of the lease SessionOpen acquired for node, and counts how: a
// takeover when another node held it. Not acquired, it is *ElsewhereError: another node
// holds a live lease. A tombstone is never acquired, and needs no lease: the actor
// answers that it was deleted, and writes nothing.
func (j *sessionJournal) took(node string, o store.Opened) error {
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
	j.setToken(o.Lease.Token)
	return nil
}

// setToken records the lease's token: the fence of every write from now on (0: none).
func (j *sessionJournal) setToken(t int64) {
	j.token.Store(t)
	j.q.SetFence(t)
}

// releaseLease gives the session's lease back, when the journal holds it: the actor has
// stopped, and another node may take the session at once.
func (j *sessionJournal) releaseLease() {
	if j.lease == nil || j.q.FencedOut() {
		return
	}
	t := j.token.Swap(0)
	j.q.SetFence(0)
	if t == 0 {
		return
	}
	ctx, cancel := j.ctx()
	defer cancel()
	if err := j.st.LeaseRelease(ctx, j.session, j.lease.Node(), t); err != nil {
		// It expires on its own, a TTL from its last renewal.
		j.log().Warn().Err(err).Msg("could not release the session's lease")
	}
}

// messagesBefore reads up to limit messages of the active path before position before
// (0: the newest), as clients were told of them: kept updates replace what the database
// holds.
func (j *sessionJournal) messagesBefore(before int64, limit int) ([]chat.Message, bool, error) {
	msgs, more, err := j.pathReader(j.leaf, before, limit)()
	if err == nil && before == 0 {
		j.recent.fill(msgs, more)
	}
	return msgs, more, err
}

// newest returns the newest limit messages of the active path as clients were told of
// them, from memory when it holds them (see recent.go), else from the database.
func (j *sessionJournal) newest(limit int) ([]chat.Message, bool, error) {
	if msgs, more, ok := j.recent.newest(limit); ok {
		return msgs, more, nil
	}
	return j.messagesBefore(0, limit)
}

// pathReader returns a read of the newest limit messages before position before (0: the
// newest) of the branch that ends at leaf (nil: an empty branch), that any goroutine may
// make: the queued writes it lays over the database are those queued now. The branch's
// newest messages may still be queued: they are followed back to the first one stored,
// and the database is read from there.
func (j *sessionJournal) pathReader(leaf *uuid.UUID, before int64, limit int) func() ([]chat.Message, bool, error) {
	queued := j.q.Queued()
	inserts := make(map[uuid.UUID]*chat.Message)
	for _, w := range queued {
		if w.Insert && w.Msg != nil {
			inserts[w.Msg.ID] = w.Msg
		}
	}
	var pending []chat.Message // the branch's queued messages, newest first
	from := leaf
	for from != nil {
		m, ok := inserts[*from]
		if !ok {
			break
		}
		pending = append(pending, *m)
		from = m.ParentID
	}
	return func() ([]chat.Message, bool, error) {
		var msgs []chat.Message
		more := false
		if from != nil {
			ctx, cancel := j.ctx()
			defer cancel()
			var err error
			if msgs, more, err = j.st.MessagesPath(ctx, j.session, from, before, limit); err != nil {
				return nil, false, err
			}
		}
		for i := len(pending) - 1; i >= 0; i-- {
			if before == 0 || pending[i].Position < before {
				msgs = append(msgs, pending[i])
			}
		}
		msgs = overlayMessages(msgs, queued, func(chat.Message) bool { return false })
		if len(msgs) > limit {
			msgs, more = msgs[len(msgs)-limit:], true
		}
		return msgs, more, nil
	}
}

// messageGet reads a message, as clients were told of it.
func (j *sessionJournal) messageGet(id uuid.UUID) (chat.Message, error) {
	queued := j.q.Queued()
	for i := len(queued) - 1; i >= 0; i-- {
		if m := queued[i].Msg; m != nil && m.ID == id {
			return *m, nil
		}
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.MessageGet(ctx, id)
}

// children returns the children of message parent (nil: the conversation's first
// messages), oldest first, those still queued included.
func (j *sessionJournal) children(parent *uuid.UUID) ([]uuid.UUID, error) {
	queued := j.q.Queued()
	ctx, cancel := j.ctx()
	defer cancel()
	ids, err := j.st.MessageChildren(ctx, j.session, parent)
	if err != nil {
		return nil, err
	}
	for _, w := range queued {
		if w.Insert && w.Msg != nil && sameID(w.Msg.ParentID, parent) && !slices.Contains(ids, w.Msg.ID) {
			ids = append(ids, w.Msg.ID)
		}
	}
	return ids, nil
}

// leafChildren returns the children of the active leaf (usually none: a leaf has
// children only when a branch was started under it, an edit or a regeneration), read
// once per leaf.
func (j *sessionJournal) leafChildren() ([]uuid.UUID, error) {
	if j.leafKidsKnown {
		return j.leafKids, nil
	}
	ids, err := j.children(j.leaf)
	if err != nil {
		return nil, err
	}
	j.leafKids, j.leafKidsKnown = ids, true
	return ids, nil
}

// setLeaf makes leaf the active leaf, whose children are kids (known: read already).
func (j *sessionJournal) setLeaf(leaf *uuid.UUID, kids []uuid.UUID, known bool) {
	j.leaf = cloneID(leaf)
	j.leafKids, j.leafKidsKnown = kids, known
}

// selectLeaf stores leaf as the session's active leaf, after the writes queued before
// it, and waits for it.
func (j *sessionJournal) selectLeaf(leaf uuid.UUID) error {
	if err := j.q.Do(func(ctx context.Context) error { return j.st.SessionSetLeaf(ctx, j.session, &leaf) }); err != nil {
		return err
	}
	j.setLeaf(&leaf, nil, false)
	j.recent.forget()
	return nil
}

// newestBelow returns the newest message under message id (itself included), those
// queued included: the leaf that selecting id shows. store.ErrNotFound when id is no
// message of the session.
func (j *sessionJournal) newestBelow(id uuid.UUID) (uuid.UUID, error) {
	j.q.Await() // the subtree's newest messages may still be on their way
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.MessageNewestBelow(ctx, j.session, id)
}

func sameID(a, b *uuid.UUID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func cloneID(id *uuid.UUID) *uuid.UUID {
	if id == nil {
		return nil
	}
	c := *id
	return &c
}

// messagesByRun reads a run's messages, as clients were told of them.
func (j *sessionJournal) messagesByRun(runID uuid.UUID) ([]chat.Message, error) {
	queued := j.q.Queued()
	ctx, cancel := j.ctx()
	defer cancel()
	msgs, err := j.st.MessagesByRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return overlayMessages(msgs, queued, func(m chat.Message) bool { return m.RunID != nil && *m.RunID == runID }), nil
}

// runGet reads a run, as clients were told of it.
func (j *sessionJournal) runGet(id uuid.UUID) (chat.Run, error) {
	if r, ok := queuedRun(j.q.Queued(), id); ok {
		return r, nil
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.RunGet(ctx, id)
}

// runLatest reads the session's newest run, as clients were told of it; store.ErrNotFound
// when it has none.
func (j *sessionJournal) runLatest() (chat.Run, error) {
	queued := j.q.Queued()
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
func (j *sessionJournal) latestRun() (chat.Run, error) {
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
func (j *sessionJournal) deleteEmpty(m chat.Message) (bool, error) {
	var deleted bool
	err := j.q.Do(func(ctx context.Context) (err error) {
		deleted, err = j.st.MessageDeleteEmpty(ctx, m.ID)
		return err
	})
	if deleted {
		j.recent.remove(m.ID)
		if sameID(j.leaf, &m.ID) {
			j.setLeaf(m.ParentID, nil, false) // as the statement did
		}
	}
	return deleted, err
}

// moveRun stores a run that leaves one of the statuses from (an ended run continued, a
// dismissed one), after the writes queued before it. Unlike updateRun it is not kept
// for a retry: its caller answers a person, who can try again.
func (j *sessionJournal) moveRun(r chat.Run, from ...chat.RunStatus) error {
	err := j.q.Do(func(ctx context.Context) error { return j.st.RunUpdate(ctx, r, from...) })
	if err == nil {
		j.recent.putRun(r)
	} else {
		j.recent.latestKnown = false
	}
	return err
}

// runByRequest finds the session's run for requestID, also one whose latest state is
// still to be stored. It returns store.ErrNotFound when there is none.
func (j *sessionJournal) runByRequest(requestID string) (chat.Run, error) {
	queued := j.q.Queued()
	for i := len(queued) - 1; i >= 0; i-- {
		if r := queued[i].Run; r != nil && r.RequestID == requestID {
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
// after the writes queued before it (journal.BeforeAck), and waited for.
//
// With maxActive above 0 it also returns how many active runs the owner had before this
// one, as the database counted them, and counted true when the database gave that
// answer (not for a start whose answer was lost and then found stored).
func (j *sessionJournal) startRun(run chat.Run, user chat.Message, maxActive int) (active int, counted bool, err error) {
	err = j.q.Do(func(ctx context.Context) (err error) {
		active, err = j.st.RunStartCounted(ctx, run, user, maxActive)
		return err
	})
	counted = err == nil || errors.Is(err, store.ErrRunLimit)
	if errors.Is(err, store.ErrRunLimit) {
		return active, counted, err // an answer: nothing was stored, no position moved
	}
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, journal.ErrWaits) {
		// The statement may have committed before its answer was lost.
		if prev, e := j.runByRequest(run.RequestID); e == nil && prev.ID == run.ID {
			err = nil
		}
	}
	if err != nil {
		// Whatever happened, the next message's position must be read again.
		j.loaded = false
		j.recent.forget()
		return active, counted, err
	}
	j.nextPos++
	if sameID(user.ParentID, j.leaf) {
		j.recent.add(user)
	} else {
		j.recent.forget() // an edit: the path is another one
	}
	j.setLeaf(&user.ID, nil, true)
	j.recent.setLatest(&run)
	j.addRequest(run.RequestID)
	return active, counted, nil
}

// maxKnownRequests bounds the request ids an actor keeps: a session with more runs is
// told new requests from repeated ones by its run starts.
const maxKnownRequests = 1000

// knowRequests records the request ids of the session's newest runs as the database
// has them (at most maxKnownRequests+1: more means the actor cannot know them all), with
// those of the runs it has queued.
func (j *sessionJournal) knowRequests(ids []string, queued []journal.Write) {
	j.requests = make([]uint64, 0, len(ids)+1)
	for _, id := range ids {
		j.requests = append(j.requests, requestHash(id))
	}
	slices.Sort(j.requests)
	j.requests = slices.Compact(j.requests)
	j.requestsKnown = true
	j.requestsComplete = len(ids) <= maxKnownRequests
	for _, w := range queued {
		if w.Run != nil {
			j.addRequest(w.Run.RequestID)
		}
	}
}

// addRequest records a run's request id, when the actor keeps them.
func (j *sessionJournal) addRequest(id string) {
	if !j.requestsKnown {
		return
	}
	h := requestHash(id)
	if i, found := slices.BinarySearch(j.requests, h); !found {
		j.requests = slices.Insert(j.requests, i, h)
	}
}

// knowsRequest reports whether the session may have a run for requestID, as far as the
// actor knows its request ids (requestsComplete: it knows them all, read when it
// opened the session). It can be wrong only the safe way: true for a new id whose hash
// is another's.
func (j *sessionJournal) knowsRequest(requestID string) bool {
	_, found := slices.BinarySearch(j.requests, requestHash(requestID))
	return j.requestsKnown && found
}

// requestSeed keys requestHash: ids chosen to collide in one process do not in another.
var requestSeed = maphash.MakeSeed()

func requestHash(id string) uint64 { return maphash.String(requestSeed, id) }

// startRetry stores a run that regenerates the answer of run.RetryOf (it has no user
// message of its own: it answers user, which becomes the active leaf). Errors are those
// of startRun.
func (j *sessionJournal) startRetry(run chat.Run, user uuid.UUID, maxActive int) error {
	err := j.q.Do(func(ctx context.Context) error { return j.st.RunStartRetry(ctx, run, user, maxActive) })
	if err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrRunLimit) && !errors.Is(err, journal.ErrWaits) {
		if prev, e := j.runByRequest(run.RequestID); e == nil && prev.ID == run.ID {
			err = nil
		}
	}
	j.recent.forget() // the path ends at user now
	if err == nil {
		j.setLeaf(&user, nil, false)
		j.recent.setLatest(&run)
		j.addRequest(run.RequestID)
	}
	return err
}

// reload forgets the next position, for when rows were stored behind the journal's back
// (a run start reported as failed that committed).
// knowAgentState records state as the session's latest agent state (Emitter.State).
func (j *sessionJournal) knowAgentState(state json.RawMessage) {
	j.agentState, j.agentStateKnown = state, true
}

// agentStateReader returns Request.AgentState: the state this journal knows, or a read
// of the newest stored one, made on the caller's goroutine. A state this journal has
// not seen reported cannot be queued behind the read.
func (j *sessionJournal) agentStateReader() func() (json.RawMessage, error) {
	if j.agentStateKnown {
		state := j.agentState
		return func() (json.RawMessage, error) { return state, nil }
	}
	return func() (json.RawMessage, error) {
		ctx, cancel := j.ctx()
		defer cancel()
		state, err := j.st.SessionAgentState(ctx, j.session)
		if err != nil {
			j.log().Error().Err(err).Msg("read the agent's state")
			return nil, errorf(CodeStorage, "could not read the agent's state: the database is unavailable")
		}
		return state, nil
	}
}

func (j *sessionJournal) reload() {
	j.loaded = false
	j.recent.forget()
}

// insert stores a new message at the next position, behind the stream. A failure is
// kept and retried like an update; an insert the database refuses is reported to the
// actor (onWrites).
func (j *sessionJournal) insert(m chat.Message) error {
	if err := j.q.Add(journal.Write{Msg: &m, Insert: true}); err != nil {
		return err
	}
	j.nextPos++
	if sameID(m.ParentID, j.leaf) {
		// Under the active leaf: the active path grows (the database does the same).
		j.setLeaf(&m.ID, nil, true)
		j.recent.add(m)
	}
	return nil
}

// branchOf returns the Branch a new message under parent will have: its parent's other
// children, when parent is the active leaf and has some. They are read when the journal
// does not know them (a leaf with children read with the session: a regeneration that
// had not answered when its process stopped); when that read fails the message has no
// Branch until it is read again.
func (j *sessionJournal) branchOf(id uuid.UUID, parent *uuid.UUID) *chat.Branch {
	if !sameID(parent, j.leaf) {
		return nil
	}
	kids, err := j.leafChildren()
	if err != nil {
		j.log().Warn().Err(err).Msg("read the branches of the active leaf")
		return nil
	}
	if len(kids) == 0 {
		return nil
	}
	return chat.BranchOf(id, append(slices.Clone(kids), id))
}

// update stores a streaming message's new state (still streaming, or its end), behind:
// clients are told at once, the database when the session's writer gets to it. When the
// database fails, the state is kept and retried. A message that is no longer streaming
// is left as it is (refused). ends, when not nil, is the message's stream log: m holds
// its text for good, and the log goes once m is stored.
func (j *sessionJournal) update(m chat.Message, ends *journal.Stream) error {
	j.recent.put(m)
	return j.q.Add(journal.Write{Msg: &m, Ends: ends})
}

// updateRun stores an active run's new state (another active status, or its end),
// behind. A run that has ended already is left as it is (refused); failures are kept
// and retried.
func (j *sessionJournal) updateRun(r chat.Run) error {
	j.recent.putRun(r)
	return j.q.Add(journal.Write{Run: &r})
}

// settle ends the rows of run runID that an insert with a lost answer may have left
// streaming, giving them status; rows whose final state the journal still keeps are
// left to their own update. It does nothing for a run whose inserts all answered. A
// failure is kept and retried, after the writes queued before it.
func (j *sessionJournal) settle(runID uuid.UUID, status chat.MessageStatus, now time.Time) error {
	if !j.lost[runID] {
		return nil
	}
	delete(j.lost, runID) // from now on the queue keeps it until it is stored
	j.recent.forget()     // it ends rows the actor does not track
	return j.q.Add(journal.Write{Settle: &journal.Settle{RunID: runID, Status: status, Now: now}})
}

// continueRun stores a run a person continued (see moveRun), marking its session active
// in the same statement, unless the session's owner has maxActive active runs
// (store.ErrRunLimit; 0 is no limit).
func (j *sessionJournal) continueRun(r chat.Run, maxActive int, from ...chat.RunStatus) error {
	err := j.q.Do(func(ctx context.Context) error { return j.st.RunContinue(ctx, r, maxActive, from...) })
	if err == nil {
		j.recent.putRun(r)
	} else {
		j.recent.latestKnown = false
	}
	return err
}

// stream returns the stream log of message id (nil without one), fenced like the
// session's writes.
func (j *sessionJournal) stream(id uuid.UUID) *journal.Stream {
	return j.w.Stream(j.session, id, j.q.Fence())
}

// streamFrom is stream for a message whose log already holds offset bytes (another
// process logged them): what it streams now follows them.
func (j *sessionJournal) streamFrom(id uuid.UUID, offset int) *journal.Stream {
	return j.w.StreamFrom(j.session, id, j.q.Fence(), offset)
}

// streamed reads what the stream log holds of the messages ids (the text a process
// streamed before it died), by message.
func (j *sessionJournal) streamed(ids []uuid.UUID) (map[uuid.UUID]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.StreamLogRead(ctx, ids)
}

// approvalRules reads the session's approval rules.
func (j *sessionJournal) approvalRules() ([]chat.ApprovalRule, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.ApprovalRules(ctx, j.session)
}

// insertRule stores an approval rule, after the writes queued before it.
// insertQueued stores a queued message, after the writes queued before it.
func (j *sessionJournal) insertQueued(m chat.Queued) error {
	return j.q.Do(func(ctx context.Context) error {
		_, err := j.st.QueuedInsert(ctx, m)
		return err
	})
}

// deleteQueued removes a queued message, after the writes queued before it.
func (j *sessionJournal) deleteQueued(requestID string) error {
	return j.q.Do(func(ctx context.Context) error {
		_, err := j.st.QueuedDelete(ctx, j.session, requestID)
		return err
	})
}

// queuedList reads the session's queued messages, oldest first.
func (j *sessionJournal) queuedList() ([]chat.Queued, error) {
	ctx, cancel := j.ctx()
	defer cancel()
	return j.st.QueuedList(ctx, j.session)
}

func (j *sessionJournal) insertRule(r chat.ApprovalRule) error {
	return j.q.Do(func(ctx context.Context) error { return j.st.ApprovalRuleInsert(ctx, r) })
}

// deleteRule removes an approval rule, after the writes queued before it, and reports
// whether there was one.
func (j *sessionJournal) deleteRule(id uuid.UUID) (bool, error) {
	var deleted bool
	err := j.q.Do(func(ctx context.Context) (err error) {
		deleted, err = j.st.ApprovalRuleDelete(ctx, j.session, id)
		return err
	})
	return deleted, err
}
