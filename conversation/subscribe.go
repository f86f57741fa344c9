package conversation

import (
	"errors"
	"slices"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

func (a *Actor) hello(req HelloRequest, n uint64) (HelloResult, error) {
	if req.Subscriber == nil {
		return HelloResult{}, errorf(CodeBadRequest, "hello needs a subscriber")
	}
	if _, ok := a.subs[req.Subscriber]; ok {
		return HelloResult{}, errorf(CodeBadRequest, "already subscribed")
	}
	if err := a.loadAs(req.Owner, true); err != nil {
		return HelloResult{}, a.loadError(err)
	}
	if a.session == nil {
		if !req.Create {
			return HelloResult{}, ErrNoSession
		}
		sess, err := a.journal.createSession(chat.Session{ID: a.id, Owner: req.Owner, CreatedAt: a.now()}, a.cfg.MaxSessionsPerUser)
		if errors.Is(err, store.ErrSessionLimit) {
			return HelloResult{}, errorf(CodeTooManySessions, "too many sessions for this user (at most %d): delete one to start another", a.cfg.MaxSessionsPerUser)
		}
		if err != nil {
			return HelloResult{}, a.storageError("create the session", err)
		}
		a.session = &sess
	}
	if a.session.Owner != req.Owner {
		return HelloResult{}, ErrNotYours
	}
	if a.session.DeletedAt != nil {
		return HelloResult{}, ErrDeleted
	}
	if err := a.takeUpSuspended(); err != nil {
		return HelloResult{}, a.storageError("continue the session's run", err)
	}

	// Held text goes out first: the newcomer starts with all of it, and its snapshot or
	// replay ends at the seq that carried it.
	a.flushDelta()
	sub := req.Subscriber
	res := HelloResult{Epoch: a.epoch, LastSeq: a.seq}
	var c CatchUp
	if req.Epoch == a.epoch {
		if replay, size, ok := a.ring.since(req.LastSeq, a.seq); ok && a.replayFits(replay, size, req.Format) {
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
	a.takeUnsubscribes() // one that came before this hello was handled
	if left, ok := a.leftEarly[sub]; ok {
		delete(a.leftEarly, sub)
		if left >= n {
			return res, nil // it left after sending this hello: its connection is closing
		}
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
	msgs, more, err := a.journal.newest(a.cfg.SnapshotMessages)
	if err != nil {
		return Snapshot{}, err
	}
	a.overlayLive(msgs)
	snap := Snapshot{SessionID: a.id, Epoch: a.epoch, LastSeq: a.seq, Messages: msgs, HasMore: more}
	if err := a.loadRules(); err != nil {
		return Snapshot{}, err
	}
	snap.ApprovalRules = slices.Clone(a.rules)
	if err := a.loadQueued(); err != nil {
		return Snapshot{}, err
	}
	snap.Queued = slices.Clone(a.queued)
	if a.run != nil {
		r := a.run.info
		snap.ActiveRun = &r
	} else if snap.LastRun, err = a.latestEnded(); err != nil {
		return Snapshot{}, err
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
	// Over HTTP no hello loaded the session first: its active leaf would be unknown, and
	// the page (and the memory of the newest messages it fills) empty. As at a hello, a
	// run no actor drives is taken up once the session is this node's.
	if err := a.load(); err != nil {
		return HistoryPage{}, a.loadError(err)
	}
	if a.session != nil {
		if err := a.takeUpSuspended(); err != nil {
			return HistoryPage{}, a.storageError("continue the session's run", err)
		}
	}
	msgs, more, err := a.journal.messagesBefore(before, limit)
	if err != nil {
		return HistoryPage{}, a.storageError("read history", err)
	}
	a.overlayLive(msgs)
	return HistoryPage{Messages: msgs, HasMore: more}, nil
}

// publish numbers ev, keeps it for replay and offers it to every subscriber. Subscribers
// encode it in their format, once per format (Event.Encode caches). A subscriber that
// cannot take it is dropped; the others are unaffected. Any event but a delta publishes
// the held delta first, so events stay in order.
//
// The event and its encodings are one allocation, which the next event reuses when
// nothing kept this one: the ring kept it compact and every subscriber is transient.
// That was a fifth of what a streaming process allocated, and the collector's pace, and
// with it chatd's tail latency under load, follows allocation. The buffer of its
// encoding is reused too when no subscriber holds it (it was written at once): another
// sixth.
func (a *Actor) publish(e Event) {
	if e.Type != EventDelta {
		a.flushDelta()
	}
	a.seq++
	e.Seq = a.seq
	p := a.spare
	a.spare = nil
	if p == nil {
		p = new(publishedEvent)
	}
	*p = publishedEvent{Event: e}
	p.enc.spare, a.spareEnc = a.spareEnc, nil
	p.Event.enc = &p.enc
	ev := &p.Event
	a.published.Add(1)
	// With more work queued, subscribers that can hold the event send it with what
	// follows, once the inbox is empty (flushIdle).
	behind := len(a.inbox) > 0
	kept := false // by a subscriber that may keep events
	held := false // its encodings, by a transient subscriber
	for sub := range a.subs {
		t, transient := sub.(TransientSubscriber)
		if !transient {
			kept = true
		}
		var ok bool
		if h, can := sub.(HoldingSubscriber); can && behind {
			ok = h.Hold(ev)
			a.holding = true
		} else {
			ok = sub.Deliver(ev)
		}
		if transient && !held && t.HoldsEncodings() {
			held = true
		}
		if !ok {
			delete(a.subs, sub)
			sub.Dropped(DropSlow)
			a.logger().Debug().Msg("dropped a subscriber that could not take an event")
		}
	}
	// Pushed once delivered, so the ring counts the encodings the subscribers made.
	evicted := a.ring.evicted
	if !a.ring.push(ev) && !kept {
		if !held {
			a.spareEnc = p.enc.reusable()
		}
		a.spare = p
	}
	if n := a.ring.evicted - evicted; n > 0 {
		a.cfg.Metrics.ringEvictions.Add(float64(n))
	}
}

// replayFits reports whether a replay is at most MaxReplayBytes: in the bytes of the
// subscriber's format when it has one (the encodings are cached, so the catch-up reuses
// them), else by the ring's estimate.
func (a *Actor) replayFits(replay []*Event, estimate int, f *Format) bool {
	if f == nil {
		return estimate <= a.cfg.MaxReplayBytes
	}
	size := 0
	for _, ev := range replay {
		if size += len(ev.Encode(f)); size > a.cfg.MaxReplayBytes {
			return false
		}
	}
	return true
}
