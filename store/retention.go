package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/queries"
)

// Pruned counts what one RetentionPruneRuns removed.
type Pruned struct {
	// Runs whose details were removed; ToolOutputs cut; StreamChunks deleted.
	Runs, ToolOutputs, StreamChunks int64
}

// RetentionPruneRuns removes the details of up to limit ended runs that are due: done
// runs ended before doneBefore, failed, cancelled and interrupted ones before
// failedBefore. Their error messages go (codes stay), tool output is cut past keep
// characters, and the stream log's chunks of their messages are deleted, in one
// transaction; each run is pruned once.
func (s *Store) RetentionPruneRuns(ctx context.Context, now, doneBefore, failedBefore time.Time, keep, limit int) (Pruned, error) {
	var p Pruned
	err := s.InTx(ctx, func(tx *Store) error {
		runs, err := tx.q.RetentionPruneRuns(ctx, tx.db, queries.RetentionPruneRunsParams{
			Now: timestampPtr(&now), DoneBefore: timestampPtr(&doneBefore), FailedBefore: timestampPtr(&failedBefore), Lim: int32(limit),
		})
		if err != nil || len(runs) == 0 {
			return err
		}
		p.Runs = int64(len(runs))
		if p.ToolOutputs, err = tx.q.RetentionTrimToolOutput(ctx, tx.db, queries.RetentionTrimToolOutputParams{Keep: int32(keep), Runs: runs}); err != nil {
			return err
		}
		if err := tx.q.RetentionMessageErrors(ctx, tx.db, runs); err != nil {
			return err
		}
		p.StreamChunks, err = tx.q.RetentionStreamLog(ctx, tx.db, runs)
		return err
	})
	if err != nil {
		return Pruned{}, fmt.Errorf("prune ended runs: %w", mapErr(err))
	}
	return p, nil
}

// SessionRef names a session and its owner.
type SessionRef struct {
	ID    uuid.UUID
	Owner string
}

// RetentionIdleSessions returns up to limit live sessions with no activity since
// before (their latest run's start, or their creation) and no active run.
func (s *Store) RetentionIdleSessions(ctx context.Context, before time.Time, limit int) ([]SessionRef, error) {
	rows, err := s.q.RetentionIdleSessions(ctx, s.db, queries.RetentionIdleSessionsParams{Before: timestampPtr(&before), Lim: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("find idle sessions: %w", mapErr(err))
	}
	out := make([]SessionRef, len(rows))
	for i, r := range rows {
		out[i] = SessionRef{ID: r.ID, Owner: r.Owner}
	}
	return out, nil
}

// RetentionWebhooks deletes up to limit webhook events delivered before
// deliveredBefore or given up before failedBefore, and returns how many.
func (s *Store) RetentionWebhooks(ctx context.Context, deliveredBefore, failedBefore time.Time, limit int) (int64, error) {
	n, err := s.q.RetentionWebhooks(ctx, s.db, queries.RetentionWebhooksParams{
		DeliveredBefore: timestampPtr(&deliveredBefore), FailedBefore: timestampPtr(&failedBefore), Lim: int32(limit),
	})
	if err != nil {
		return 0, fmt.Errorf("delete old webhook events: %w", mapErr(err))
	}
	return n, nil
}
