package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/chatd/chatd/agent/sandbox"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store"
)

// ErrNotFound is returned by Sessions for a session that does not exist, belongs to
// another user, or was deleted: the three look the same to a caller, so nobody learns
// which ids others use. It is a *conversation.Error with CodeNotFound.
var ErrNotFound error = &conversation.Error{Code: conversation.CodeNotFound, Message: "session not found"}

// deleteTimeout bounds a deletion once it has begun.
const deleteTimeout = 30 * time.Second

// SessionStore is what Sessions needs of the database. *store.Store implements it.
type SessionStore interface {
	SessionGet(ctx context.Context, id uuid.UUID) (chat.Session, error)
	SessionsList(ctx context.Context, owner string, after *chat.SessionCursor, limit int) ([]chat.SessionSummary, error)
	SessionSummary(ctx context.Context, owner string, id uuid.UUID) (chat.SessionSummary, error)
	SessionRename(ctx context.Context, owner string, id uuid.UUID, title string) error
	SessionDelete(ctx context.Context, owner string, id uuid.UUID, now time.Time) error
}

var _ SessionStore = (*store.Store)(nil)

// SessionSandboxes is what deleting a session does to its sandboxes (agent.Sandboxes).
type SessionSandboxes interface {
	// Kill kills the session's sandbox, if it has one.
	Kill(ctx context.Context, sessionID uuid.UUID) error
	// RemoveDeleted removes the workspaces the deleted session had on this node, and
	// returns how many it removed.
	RemoveDeleted(ctx context.Context, sessionID uuid.UUID) (int, error)
	// Files lists the session's workspace; OpenFile opens one of its files. Their errors
	// include sandbox.ErrNoWorkspace, ErrWorkspaceElsewhere and ErrBadPath.
	Files(ctx context.Context, sessionID uuid.UUID) ([]sandbox.File, bool, error)
	OpenFile(ctx context.Context, sessionID uuid.UUID, name string) (*os.File, fs.FileInfo, error)
}

// Sessions is a user's conversation list: listing and renaming read and write the
// store; deleting also ends the session's actor, kills its sandbox and removes its
// workspaces. It is what the HTTP sessions API calls (transport.Sessions). Its errors
// are *conversation.Error: ErrNotFound, CodeStorage when the database does not answer
// (CodeBadRequest or CodeInternal when it refuses a statement for good: see
// conversation.StoreError), CodeInternal when the sandbox cannot be killed; or the
// context's error.
type Sessions struct {
	hub       *Hub
	store     SessionStore
	runs      RunStore
	sandboxes SessionSandboxes
	log       zerolog.Logger
}

// NewSessions returns the conversation list of the sessions in st, whose actors h runs.
// sandboxes kills a deleted session's sandbox and removes its workspaces; nil when
// sessions have none.
func NewSessions(h *Hub, st *store.Store, sandboxes SessionSandboxes) *Sessions {
	return &Sessions{hub: h, store: st, runs: st, sandboxes: sandboxes, log: h.log.With().Str("component", "sessions").Logger()}
}

// List returns up to limit of owner's sessions that have a run, most recently active
// first, after the cursor (nil: from the first).
func (s *Sessions) List(ctx context.Context, owner string, after *chat.SessionCursor, limit int) ([]chat.SessionSummary, error) {
	page, err := s.store.SessionsList(ctx, owner, after, limit)
	if err != nil {
		return nil, s.fail(ctx, "list the sessions", err)
	}
	return page, nil
}

// Rename sets the title of owner's session id, and returns the session as the list
// shows it. The title is stored as given: the caller checks it (chat.CheckTitle).
func (s *Sessions) Rename(ctx context.Context, owner string, id uuid.UUID, title string) (chat.SessionSummary, error) {
	if err := s.store.SessionRename(ctx, owner, id, title); err != nil {
		return chat.SessionSummary{}, s.fail(ctx, "rename the session", err)
	}
	sum, err := s.store.SessionSummary(ctx, owner, id)
	if err != nil {
		return chat.SessionSummary{}, s.fail(ctx, "read the session", err)
	}
	return sum, nil
}

// Messages returns up to limit messages before position before (0: the newest) of
// owner's session id: of its active path, or, with through, of the branch through that
// message (without selecting it). The session's actor reads them, with the text of a
// segment still streaming.
func (s *Sessions) Messages(ctx context.Context, owner string, id uuid.UUID, through *uuid.UUID, before int64, limit int) (conversation.HistoryPage, error) {
	if err := s.owned(ctx, owner, id); err != nil {
		return conversation.HistoryPage{}, err
	}
	var page conversation.HistoryPage
	err := s.hub.Do(ctx, id, func(a *conversation.Actor) (err error) {
		if through != nil {
			page, err = a.Branch(ctx, *through, before, limit)
		} else {
			page, err = a.History(ctx, before, limit)
		}
		return err
	})
	return page, err
}

// SelectBranch makes the branch through message msg the active path of owner's session
// id, for every tab (conversation.Actor.SelectBranch).
func (s *Sessions) SelectBranch(ctx context.Context, owner string, id, msg uuid.UUID) error {
	if err := s.owned(ctx, owner, id); err != nil {
		return err
	}
	return s.hub.Do(ctx, id, func(a *conversation.Actor) error { return a.SelectBranch(ctx, msg) })
}

// owned checks that session id exists, is owner's and is not deleted: ErrNotFound
// otherwise.
func (s *Sessions) owned(ctx context.Context, owner string, id uuid.UUID) error {
	sess, err := s.store.SessionGet(ctx, id)
	if err == nil && (sess.Owner != owner || sess.DeletedAt != nil) {
		err = store.ErrNotFound
	}
	if err != nil {
		return s.fail(ctx, "read the session", err)
	}
	return nil
}

// Delete deletes owner's session id for good. In order:
//
//  1. New actors for the session wait (a hello or a recovery meanwhile would load it
//     before its rows are gone).
//  2. Its actor in this process, if any, cancels the active run, closes its subscribers
//     (DropDeleted: 4004 "session deleted" on a WebSocket), stops, and its run goroutine
//     returns; nothing of this process writes to the session after that.
//  3. Its sandbox is killed.
//  4. Its runs and messages are deleted and the session row becomes a tombstone, in one
//     transaction (store.SessionDelete), which also marks every workspace the session
//     had for removal. A hello with the id then gets ErrDeleted.
//  5. The workspaces this node holds are removed. Those of sandboxes other nodes made
//     are removed by those nodes' janitors at their next pass; one that fails here is
//     left to this node's janitor (the deletion has happened: it is not an error).
//
// Once the session is found to be owner's, the deletion goes on when ctx ends (the
// client went away), bounded by deleteTimeout. When a step before 5 fails the deletion
// stops there and can be tried again: the session is kept (with its run cancelled, if
// step 2 was reached).
//
// Several nodes: an actor of the session in another chatd process is not told (until
// leases say which node holds a session). What it holds in memory stays visible to its
// own subscribers until it is evicted, but it cannot bring the rows back: its run
// start and its retry find the tombstone and end it as deleted (its subscribers are
// closed with 4004), a streaming run's next insert finds its run gone and the run ends
// with a storage error, its updates find no row and are dropped, and a sandbox it
// creates is refused and removed (agent.Sandboxes.Get). Sandboxes are per node: one
// that another node made is not killed here (this node cannot reach it) but, marked
// deleted with the session, is killed and removed by that node's janitor.
func (s *Sessions) Delete(ctx context.Context, owner string, id uuid.UUID) error {
	a, done, err := s.hub.beginDelete(ctx, id)
	if errors.Is(err, ErrClosed) {
		// Not a fault: the process is stopping. Another process (or this one, restarted)
		// can delete it.
		return errShuttingDown
	}
	if err != nil {
		return err
	}
	defer done()
	sess, err := s.store.SessionGet(ctx, id)
	if err == nil && (sess.Owner != owner || sess.DeletedAt != nil) {
		err = store.ErrNotFound
	}
	if err != nil {
		return s.fail(ctx, "read the session", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	if a != nil {
		if err := a.Delete(ctx); err != nil {
			return err
		}
		if err := a.Wait(ctx); err != nil {
			return err
		}
	}
	if s.sandboxes != nil {
		if err := s.sandboxes.Kill(ctx, id); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.log.Error().Err(err).Str("session_id", id.String()).Msg("kill the sandbox of a session being deleted")
			return &conversation.Error{Code: conversation.CodeInternal, Message: "could not stop the session's sandbox; try again"}
		}
	}
	if err := s.store.SessionDelete(ctx, owner, id, s.hub.now()); err != nil {
		return s.fail(ctx, "delete the session", err)
	}
	removed := 0
	if s.sandboxes != nil {
		// After the tombstone, not before: no sandbox can be made for the session now,
		// and every one it had is recorded as the deleted session's.
		var err error
		removed, err = s.sandboxes.RemoveDeleted(ctx, id)
		if err != nil {
			s.log.Warn().Err(err).Str("session_id", id.String()).
				Msg("could not remove every workspace of a deleted session; the sandbox janitor tries again at its next pass")
		}
	}
	s.log.Info().Str("session_id", id.String()).Bool("actor", a != nil).Int("workspaces_removed", removed).Msg("deleted a session")
	return nil
}

// errShuttingDown answers a deletion that arrives while the hub shuts down.
var errShuttingDown = &conversation.Error{Code: conversation.CodeInternal, Message: "chatd is shutting down: try again in a moment"}

// fail maps a store error: ErrNotFound, the context's own error, or
// conversation.StoreError's (CodeStorage when the database did not answer; the cause is
// logged here, not returned: the caller answers a client with it).
func (s *Sessions) fail(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ErrNotFound
	case ctx.Err() != nil:
		return ctx.Err()
	}
	s.log.Error().Err(err).Str("op", op).Msg("database call failed")
	return conversation.StoreError(op, err)
}
