package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// SessionGet returns the session with id, or ErrNotFound.
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
	return sessionFromRow(row), nil
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
		ID:        r.ID,
		Owner:     r.Owner,
		Title:     r.Title,
		SandboxID: deref(r.SandboxID),
		CreatedAt: r.CreatedAt.UTC(),
		UpdatedAt: r.UpdatedAt.UTC(),
	}
}
