package conversation

import (
	"errors"
	"fmt"
	"strings"

	"github.com/chatd/chatd/store"
)

// Error codes of *Error. They are the protocol's error codes; the transport sends them as
// they are. Agents may end runs with codes of their own.
const (
	CodeBadRequest   = "bad_request"
	CodeNotFound     = "not_found"
	CodeUnauthorized = "unauthorized"
	CodeRunActive    = "run_active"
	// CodeQueueFull: a queued send over Config.MaxQueued.
	CodeQueueFull = "queue_full"
	CodeNoRun     = "no_run"
	CodeConflict  = "conflict"
	CodeTooLarge  = "too_large"
	// CodeRateLimited refuses a run over its user's limit of active runs
	// (Config.MaxRunsPerUser); transports use it for their own limits too.
	CodeRateLimited = "rate_limited"
	// CodeTooManySessions refuses a new session over its user's limit of live sessions
	// (Config.MaxSessionsPerUser): unlike rate_limited, waiting does not help; deleting
	// a session does.
	CodeTooManySessions = "too_many_sessions"
	CodeStorage         = "storage"
	CodeInternal        = "internal"

	// CodeAgent ends a run whose agent failed with an error that carries no code.
	CodeAgent = "agent_error"
	// CodeInterrupted ends a run that the server stopped: a shutdown, or a crash found
	// at the next start-up.
	CodeInterrupted = "interrupted"
)

// Error is an error with a code a client can act on and a message a person can read.
// Commands return it for bad input and refused operations; an agent returns it to end its
// run with a specific code.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// StoreError is the *Error a client is answered with when a store call of what it asked
// for (op says which: "read the run") failed with err, neither store.ErrNotFound nor
// the end of the request's context. A statement the database refuses for good
// (store.ErrInvalid) is no outage, and trying again cannot help: a value it cannot take
// (a data exception, SQLSTATE class 22: text that is not UTF-8, a number out of range)
// is CodeBadRequest, as a request's values are the client's; any other refusal (a
// constraint, a statement the schema does not know) is CodeInternal. Anything else is
// CodeStorage: the database did not answer, try again.
func StoreError(op string, err error) *Error {
	if errors.Is(err, store.ErrInvalid) {
		state := store.SQLState(err)
		if strings.HasPrefix(state, "22") {
			return errorf(CodeBadRequest, "could not %s: the database refuses one of its values (SQLSTATE %s)", op, state)
		}
		return errorf(CodeInternal, "could not %s: the database refuses it (SQLSTATE %s)", op, state)
	}
	return errorf(CodeStorage, "could not %s: the database is unavailable", op)
}

var (
	// ErrStopped is returned by an actor that has stopped (evicted or shut down). The
	// hub answers it by starting a new actor for the session.
	ErrStopped = errors.New("conversation actor stopped")
	// ErrNotYours is returned by Hello for a session that belongs to another user.
	ErrNotYours = errors.New("session belongs to another user")
	// ErrNoSession is returned by Hello for a session that does not exist when the hello
	// may not create it (HelloRequest.Create). Transports answer it as they answer
	// ErrNotYours, so that another user's session looks like a missing one.
	ErrNoSession = errors.New("no such session")
	// ErrDeleted is returned for a session that was deleted: by Hello for its tombstone,
	// and by commands that find it deleted (the actor then lets its subscribers go with
	// DropDeleted and stops). It is an *Error with CodeNotFound.
	ErrDeleted error = &Error{Code: CodeNotFound, Message: "the session was deleted"}
	// ErrSuspended is the cause (context.Cause) of a run's cancelled context when the run
	// was suspended, not ended: it waits in the database to be continued (a shutdown, or
	// its actor let go while the run waits for a decision). An agent leaves what it holds
	// for the run as it is (a sandbox paused for an approval stays paused).
	ErrSuspended = errors.New("run suspended")
	// ErrRunEnded is returned by Emitter methods once the run has ended (cancelled,
	// failed, or the server is shutting down). The agent should return.
	ErrRunEnded = errors.New("run ended")
)
