package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// SessionGet returns the session with id, or ErrNotFound. A deleted session's tombstone
// is returned with DeletedAt set.
func (s *Store) SessionGet(ctx context.Context, id uuid.UUID) (chat.Session, error) {
	row, err := s.q.SessionGet(ctx, s.db, id)
	if err != nil {
		return chat.Session{}, fmt.Errorf("get session %s: %w", id, mapErr(err))
	}
	return sessionFromRow(row), nil
}

// SessionCreate stores sess unless a session with its id exists, and returns the stored
// session either way; compare its Owner to learn whose it is.
func (s *Store) SessionCreate(ctx context.Context, sess chat.Session) (chat.Session, error) {
	row, err := s.q.SessionInsert(ctx, s.db, queries.SessionInsertParams{
		ID:        sess.ID,
		Owner:     sess.Owner,
		Title:     sess.Title,
		CreatedAt: chat.Timestamp(sess.CreatedAt),
	})
	if err != nil {
		return chat.Session{}, fmt.Errorf("create session %s: %w", sess.ID, mapErr(err))
	}
	return sessionFromRow(queries.Session(row)), nil
}

// SessionCreateLimited is SessionCreate for an owner who may have at most max live
// sessions: a new one past that is ErrSessionLimit, and nothing is written. A session that
// exists already is returned as SessionCreate would. max 0, or the anonymous owner (""),
// is no limit. Creations of one owner are serialized across every node.
func (s *Store) SessionCreateLimited(ctx context.Context, sess chat.Session, max int) (chat.Session, error) {
	if max <= 0 || sess.Owner == "" {
		return s.SessionCreate(ctx, sess)
	}
	var out chat.Session
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.ownerLock(ctx, sess.Owner); err != nil {
			return err
		}
		existing, err := tx.SessionGet(ctx, sess.ID)
		switch {
		case err == nil:
			out = existing
			return nil
		case !errors.Is(err, ErrNotFound):
			return err
		}
		if err := tx.underLimit(ctx, sess.Owner, max); err != nil {
			return err
		}
		out, err = tx.SessionCreate(ctx, sess)
		return err
	})
	if err != nil {
		return chat.Session{}, fmt.Errorf("create session %s: %w", sess.ID, err)
	}
	return out, nil
}

// ownerLock serializes the creation of owner's sessions until the transaction ends.
func (s *Store) ownerLock(ctx context.Context, owner string) error {
	return mapErr(s.q.SessionsOwnerLock(ctx, s.db, owner))
}

// underLimit is ErrSessionLimit when owner has max live sessions or more.
func (s *Store) underLimit(ctx context.Context, owner string, max int) error {
	n, err := s.q.SessionsOwnerLive(ctx, s.db, owner)
	if err != nil {
		return mapErr(err)
	}
	if n >= int64(max) {
		return ErrSessionLimit
	}
	return nil
}

// SessionSandbox returns the id of the session's sandbox, "" for none. It returns
// ErrNotFound for an unknown session.
func (s *Store) SessionSandbox(ctx context.Context, id uuid.UUID) (string, error) {
	sess, err := s.SessionGet(ctx, id)
	if err != nil {
		return "", err
	}
	return sess.SandboxID, nil
}

func sessionFromRow(r queries.Session) chat.Session {
	return chat.Session{
		ID:         r.ID,
		Owner:      r.Owner,
		Title:      r.Title,
		SandboxID:  deref(r.SandboxID),
		CreatedAt:  r.CreatedAt.UTC(),
		UpdatedAt:  r.UpdatedAt.UTC(),
		DeletedAt:  utcPtr(r.DeletedAt),
		ActiveLeaf: r.ActiveLeaf,
	}
}

// SessionsList returns up to limit of owner's sessions that have a run and are not
// deleted, most recently active first, starting after the cursor (nil: from the first).
// It reads one user's rows only, by an index on (owner, active_at, id).
func (s *Store) SessionsList(ctx context.Context, owner string, after *chat.SessionCursor, limit int) ([]chat.SessionSummary, error) {
	p := queries.SessionsListParams{PreviewChars: chat.PreviewLen, Owner: owner, MaxRows: int32(limit)}
	if after != nil {
		p.AfterAt, p.AfterID = ptr(chat.Timestamp(after.ActiveAt)), &after.ID
	}
	rows, err := s.q.SessionsList(ctx, s.db, p)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", mapErr(err))
	}
	out := make([]chat.SessionSummary, len(rows))
	for i, r := range rows {
		out[i] = summaryFromRow(queries.SessionSummaryGetRow(r))
	}
	return out, nil
}

// SessionSummary returns owner's session id as the conversation list shows it, also
// when it has no run yet. It returns ErrNotFound when the session does not exist, is
// another user's, or was deleted.
func (s *Store) SessionSummary(ctx context.Context, owner string, id uuid.UUID) (chat.SessionSummary, error) {
	row, err := s.q.SessionSummaryGet(ctx, s.db, queries.SessionSummaryGetParams{PreviewChars: chat.PreviewLen, ID: id, Owner: owner})
	if err != nil {
		return chat.SessionSummary{}, fmt.Errorf("get session %s: %w", id, mapErr(err))
	}
	return summaryFromRow(row), nil
}

// SessionRename sets the title of owner's session id. Its place in the list does not
// change. It returns ErrNotFound when the session does not exist, is another user's, or
// was deleted.
func (s *Store) SessionRename(ctx context.Context, owner string, id uuid.UUID, title string) error {
	n, err := s.q.SessionRename(ctx, s.db, queries.SessionRenameParams{ID: id, Owner: owner, Title: title})
	if err != nil {
		return fmt.Errorf("rename session %s: %w", id, mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("rename session %s: %w", id, ErrNotFound)
	}
	return nil
}

// SessionDelete deletes owner's session id in one transaction: its runs and messages
// are deleted, and the session row stays as a tombstone (deleted at now, title and
// sandbox forgotten) so its id is never used again. Kill its sandbox first: the
// tombstone no longer names it. Every workspace the session had is marked for removal
// (WorkspacesDue, SessionDeletedWorkspaces). A process still holding the session can write nothing
// to it afterwards: run starts find it deleted, message inserts find their run gone.
// It returns ErrNotFound when the session does not exist, is another user's, or was
// deleted already.
func (s *Store) SessionDelete(ctx context.Context, owner string, id uuid.UUID, now time.Time) error {
	err := s.InTx(ctx, func(tx *Store) error {
		n, err := tx.q.SessionTombstone(ctx, tx.db, queries.SessionTombstoneParams{ID: id, Owner: owner, DeletedAt: ptr(chat.Timestamp(now))})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		// Every workspace the session had goes: each node's janitor removes those of its
		// sandboxes (the deleting node removes its own at once, agent.Sandboxes).
		if err := tx.q.WorkspacesReleaseDeleted(ctx, tx.db, queries.WorkspacesReleaseDeletedParams{SessionID: id, DeletedAt: ptr(chat.Timestamp(now))}); err != nil {
			return err
		}
		if err := tx.q.RunsLockBySession(ctx, tx.db, id); err != nil {
			return err
		}
		// The stream log is found through the messages, so it goes before them.
		if err := tx.q.StreamLogDeleteBySession(ctx, tx.db, id); err != nil {
			return err
		}
		// Messages first: deleting the runs first would have each message's run_id set
		// to NULL just before the message goes.
		if err := tx.q.MessagesDeleteBySession(ctx, tx.db, id); err != nil {
			return err
		}
		return tx.q.RunsDeleteBySession(ctx, tx.db, id)
	})
	if err != nil {
		return fmt.Errorf("delete session %s: %w", id, mapErr(err))
	}
	return nil
}

func summaryFromRow(r queries.SessionSummaryGetRow) chat.SessionSummary {
	sum := chat.SessionSummary{
		ID:            r.ID,
		Title:         r.Title,
		CreatedAt:     r.CreatedAt.UTC(),
		ActiveAt:      r.ActiveAt.UTC(),
		Preview:       chat.Preview(r.Preview, chat.PreviewLen),
		ContextTokens: r.ContextTokens,
		ContextWindow: r.ContextWindow,
		Progress:      progressOf(r.ProgressStep, r.ProgressOf, r.ProgressLabel),
	}
	if st := chat.RunStatus(r.LatestRunStatus); st.Active() {
		sum.ActiveRunID, sum.ActiveRunStatus = r.LatestRunID, st
	}
	return sum
}

// SessionForClientID returns the session of owner's chat clientID (an id the client
// chose, such as the AI SDK's chat id), creating it at now when it has none; deleted
// tells a tombstone, whose chat id stays taken. A new session that would take owner
// past max live sessions is ErrSessionLimit, and nothing is written (max 0, or the
// anonymous owner: no limit).
func (s *Store) SessionForClientID(ctx context.Context, owner, clientID string, now time.Time, max int) (id uuid.UUID, deleted bool, err error) {
	if max > 0 && owner != "" {
		// The chat's session usually exists: found without a lock. A new one is made
		// under the owner's lock, counted first.
		id, deleted, err := s.SessionByClientID(ctx, owner, clientID)
		if !errors.Is(err, ErrNotFound) {
			return id, deleted, err
		}
		err = s.InTx(ctx, func(tx *Store) error {
			if err := tx.ownerLock(ctx, owner); err != nil {
				return err
			}
			id, deleted, err = tx.SessionByClientID(ctx, owner, clientID)
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			if err := tx.underLimit(ctx, owner, max); err != nil {
				return fmt.Errorf("session of chat %q: %w", clientID, err)
			}
			id, deleted, err = tx.SessionForClientID(ctx, owner, clientID, now, 0)
			return err
		})
		return id, deleted, err
	}
	row, err := s.q.SessionForClientID(ctx, s.db, queries.SessionForClientIDParams{
		ID: uuid.New(), Owner: owner, CreatedAt: chat.Timestamp(now), ClientID: clientID,
	})
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("session of chat %q: %w", clientID, mapErr(err))
	}
	return row.ID, row.DeletedAt != nil, nil
}

// SessionByClientID returns the session of owner's chat clientID, or ErrNotFound.
func (s *Store) SessionByClientID(ctx context.Context, owner, clientID string) (id uuid.UUID, deleted bool, err error) {
	row, err := s.q.SessionByClientID(ctx, s.db, queries.SessionByClientIDParams{Owner: owner, ClientID: clientID})
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("session of chat %q: %w", clientID, mapErr(err))
	}
	return row.ID, row.DeletedAt != nil, nil
}
