package conversation

import (
	"slices"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
)

// The session's newest messages, in memory. Every message the actor writes goes through
// its journal, so once it has read the newest ones (its first snapshot) it knows them as
// they change, as clients were told: a hello that needs a snapshot of a live session,
// and a run's history for its model, are then served without reading the database. A
// reconnect storm past the ring costs no database reads for live sessions.
//
// What the actor cannot follow exactly it forgets, and the next read fills it again: rows
// settled by a statement (a lost insert, an interrupted run), a path that changed (a
// branch selected, an edit, a regeneration), positions that moved under it. It holds the
// active path only: a message written on another branch is not added. It holds at most recentMaxBytes of content;
// past that the oldest messages go, and a snapshot it can no longer serve whole is read
// from the database.

// recentMaxBytes bounds the content a session keeps in memory (a snapshot's worth).
const recentMaxBytes = 256 << 10

type recentMessages struct {
	known bool
	// msgs are the newest messages of the active path in position order; complete:
	// they are all of the path's (no older message exists).
	msgs     []chat.Message
	complete bool
	bytes    int

	// The session's latest run, when latestKnown (nil: it has none).
	latest      *chat.Run
	latestKnown bool
}

func messageBytes(m chat.Message) int {
	n := len(m.Content) + 256
	if m.Tool != nil {
		n += len(m.Tool.Input)
		if m.Tool.Output != nil {
			n += len(*m.Tool.Output)
		}
	}
	return n + len(m.ProviderData)
}

// fill replaces the messages with msgs read from the database (the newest ones; more
// says older ones exist), as clients were told of them.
func (r *recentMessages) fill(msgs []chat.Message, more bool) {
	r.msgs = slices.Clone(msgs)
	r.complete = !more
	r.bytes = 0
	for _, m := range r.msgs {
		r.bytes += messageBytes(m)
	}
	r.known = true
	r.trim()
}

// forget drops the messages: the database is the truth again.
func (r *recentMessages) forget() {
	r.known, r.msgs, r.complete, r.bytes = false, nil, false, 0
	r.latest, r.latestKnown = nil, false
}

// add appends a message the actor stores at the next position.
func (r *recentMessages) add(m chat.Message) {
	if !r.known {
		return
	}
	r.msgs = append(r.msgs, m)
	r.bytes += messageBytes(m)
	r.trim()
}

// put replaces a message with its new state.
func (r *recentMessages) put(m chat.Message) {
	if !r.known {
		return
	}
	for i := len(r.msgs) - 1; i >= 0; i-- {
		if r.msgs[i].ID == m.ID {
			r.bytes += messageBytes(m) - messageBytes(r.msgs[i])
			r.msgs[i] = m
			r.trim()
			return
		}
	}
	// An older message than the ones kept: nothing to do, it is not in a snapshot.
}

// remove drops a message the actor deleted.
func (r *recentMessages) remove(id uuid.UUID) {
	r.msgs = slices.DeleteFunc(r.msgs, func(m chat.Message) bool {
		if m.ID == id {
			r.bytes -= messageBytes(m)
			return true
		}
		return false
	})
}

func (r *recentMessages) trim() {
	for len(r.msgs) > 0 && r.bytes > recentMaxBytes {
		r.bytes -= messageBytes(r.msgs[0])
		r.msgs = r.msgs[1:]
		r.complete = false
	}
	if len(r.msgs) == 0 && !r.complete {
		r.known = false // it holds nothing a read could be served from
	}
}

// newest returns the newest limit messages, and whether older ones exist, when memory
// holds them all (ok).
func (r *recentMessages) newest(limit int) (msgs []chat.Message, more, ok bool) {
	if !r.known || (!r.complete && len(r.msgs) < limit) {
		return nil, false, false
	}
	from := max(len(r.msgs)-limit, 0)
	return slices.Clone(r.msgs[from:]), from > 0 || !r.complete, true
}

// upTo returns the newest limit messages of the active path up to and including message
// id, when memory holds them (ok).
func (r *recentMessages) upTo(id uuid.UUID, limit int) ([]chat.Message, bool) {
	if !r.known {
		return nil, false
	}
	i := slices.IndexFunc(r.msgs, func(m chat.Message) bool { return m.ID == id })
	if i < 0 || (!r.complete && i+1 < limit) {
		return nil, false
	}
	return slices.Clone(r.msgs[max(i+1-limit, 0) : i+1]), true
}

// setLatest records the session's latest run.
func (r *recentMessages) setLatest(run *chat.Run) {
	if run == nil {
		r.latest = nil
	} else {
		c := *run
		r.latest = &c
	}
	r.latestKnown = true
}

// putRun records a run's new state, when it is the latest.
func (r *recentMessages) putRun(run chat.Run) {
	if r.latestKnown && r.latest != nil && r.latest.ID == run.ID {
		r.setLatest(&run)
	}
}
