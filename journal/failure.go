package journal

import (
	"errors"

	"github.com/chatd/chatd/store"
)

// Failure says what the database's refusal of a write means for it.
type Failure uint8

const (
	// Transient: the write may pass if made again (the connection was lost, the server
	// is shutting down or has too many connections, a deadlock, a timeout). It is kept,
	// and the queue waits for its retry: the writes behind it wait too.
	Transient Failure = iota + 1
	// Refused: the row has moved past the states the write may be made from (a run that
	// ended, a message no longer streaming), or is missing; for an insert, its position
	// is taken. The database keeps what it has; the write is dropped.
	Refused
	// Permanent: the database will never take the write as it is (an invalid value, a
	// constraint it breaks). It is given up at once.
	Permanent
	// Gone: a row the write refers to is gone: the session was deleted, by another node
	// or while this one held it. It is dropped, and so is the session's actor.
	Gone
	// Fenced: the write's fence is no longer the session's lease token: another node
	// holds the session. Nothing more of the queue is written.
	Fenced
)

func (f Failure) String() string {
	switch f {
	case Transient:
		return "transient"
	case Refused:
		return "refused"
	case Permanent:
		return "permanent"
	case Gone:
		return "gone"
	case Fenced:
		return "fenced"
	}
	return "none"
}

// Classify says what err, a write's error from the store, means.
func Classify(err error) Failure {
	switch {
	case errors.Is(err, store.ErrFenced):
		return Fenced
	case errors.Is(err, store.ErrGone):
		return Gone
	case errors.Is(err, store.ErrInvalid), errors.Is(err, ErrNoFence):
		return Permanent
	case errors.Is(err, store.ErrStale), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return Refused
	}
	return Transient
}

// ErrNoFence refuses a write of a session held under a lease that carries no fence: it
// could overwrite what another node holding the session wrote.
var ErrNoFence = errors.New("journal: a write of a leased session needs its lease's fence")

// ErrFencedOut is what a write gets once its queue is fenced out.
var ErrFencedOut = store.ErrFenced

// Outcome is a write the actor must hear about: one that failed (and, when Transient,
// waits for its retry) or was refused, given up or fenced.
type Outcome struct {
	Write   Write
	Err     error
	Failure Failure
}
