package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// QueuedInsert stores a message queued behind a session's active run and reports whether
// it was stored: false when its request id is queued already, or (fenced like every write
// of an actor) when the session's lease moved on.
func (s *Store) QueuedInsert(ctx context.Context, m chat.Queued) (bool, error) {
	n, err := s.q.QueuedInsert(ctx, s.w, queries.QueuedInsertParams{
		SessionID: m.SessionID,
		RequestID: m.RequestID,
		Content:   m.Content,
		CreatedAt: chat.Timestamp(m.CreatedAt),
		Fence:     fenceOf(ctx),
	})
	if err != nil {
		return false, fmt.Errorf("insert queued message: %w", mapErr(err))
	}
	return n > 0, nil
}

// QueuedDelete removes a queued message and reports whether there was one.
func (s *Store) QueuedDelete(ctx context.Context, sessionID uuid.UUID, requestID string) (bool, error) {
	n, err := s.q.QueuedDelete(ctx, s.w, queries.QueuedDeleteParams{SessionID: sessionID, RequestID: requestID, Fence: fenceOf(ctx)})
	if err != nil {
		return false, fmt.Errorf("delete queued message %q: %w", requestID, mapErr(err))
	}
	return n > 0, nil
}

// QueuedList lists a session's queued messages, oldest first.
func (s *Store) QueuedList(ctx context.Context, sessionID uuid.UUID) ([]chat.Queued, error) {
	rows, err := s.q.QueuedList(ctx, s.db, sessionID)
	if err != nil {
		return nil, fmt.Errorf("list queued messages of session %s: %w", sessionID, mapErr(err))
	}
	out := make([]chat.Queued, len(rows))
	for i, r := range rows {
		out[i] = chat.Queued{SessionID: r.SessionID, RequestID: r.RequestID, Content: r.Content, CreatedAt: r.CreatedAt.UTC()}
	}
	return out, nil
}
