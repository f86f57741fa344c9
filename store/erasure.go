package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// OwnerLiveSessions returns the ids of owner's sessions that are not deleted.
func (s *Store) OwnerLiveSessions(ctx context.Context, owner string) ([]uuid.UUID, error) {
	ids, err := s.q.OwnerLiveSessions(ctx, s.db, owner)
	if err != nil {
		return nil, fmt.Errorf("list the sessions of a user: %w", mapErr(err))
	}
	return ids, nil
}

// Erased counts the rows an erasure removed.
type Erased struct {
	Sessions      int64 `json:"sessions"`
	Runs          int64 `json:"runs"`
	StreamChunks  int64 `json:"streamChunks"`
	WebhookEvents int64 `json:"webhookEvents"`
}

// EraseOwner removes, in one transaction, every row left of owner: their session rows
// (deleted sessions' tombstones included) with everything that cascades from them, runs,
// the stream log's chunks of their messages and their webhook events. Live sessions
// should be deleted first (hub.Sessions.Delete), which ends their actors and sandboxes;
// what is left here is rows. A second call finds nothing.
func (s *Store) EraseOwner(ctx context.Context, owner string) (Erased, error) {
	var e Erased
	err := s.InTx(ctx, func(tx *Store) (err error) {
		if e.StreamChunks, err = tx.q.EraseOwnerStreamLog(ctx, tx.db, owner); err != nil {
			return err
		}
		if e.WebhookEvents, err = tx.q.EraseOwnerWebhooks(ctx, tx.db, owner); err != nil {
			return err
		}
		if e.Runs, err = tx.q.EraseOwnerRuns(ctx, tx.db, owner); err != nil {
			return err
		}
		e.Sessions, err = tx.q.EraseOwnerSessions(ctx, tx.db, owner)
		return err
	})
	if err != nil {
		return Erased{}, fmt.Errorf("erase a user: %w", mapErr(err))
	}
	return e, nil
}
