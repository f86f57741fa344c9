package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// SessionSetSandbox records the session's sandbox ("" for none), new at now: used now
// and running. It returns ErrNotFound for an unknown session.
func (s *Store) SessionSetSandbox(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time) error {
	return s.setSandbox(ctx, id, sandboxID, now, "")
}

func (s *Store) setSandbox(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time, node string) error {
	var sb *string
	var used *time.Time
	if sandboxID != "" {
		sb, used = &sandboxID, &now
	}
	n, err := s.q.SessionSetSandbox(ctx, s.db, queries.SessionSetSandboxParams{ID: id, SandboxID: sb, UsedAt: used, Node: node})
	if err != nil {
		return fmt.Errorf("set sandbox of session %s: %w", id, mapErr(err))
	}
	if n == 0 {
		return fmt.Errorf("set sandbox of session %s: %w", id, ErrNotFound)
	}
	return nil
}

// SessionSandboxKilledAt returns when the sandbox janitor killed the session's last
// sandbox, nil when it did not or the session has a new one. ErrNotFound for an unknown
// session.
func (s *Store) SessionSandboxKilledAt(ctx context.Context, id uuid.UUID) (*time.Time, error) {
	t, err := s.q.SessionSandboxKilledAt(ctx, s.db, id)
	if err != nil {
		return nil, fmt.Errorf("get sandbox of session %s: %w", id, mapErr(err))
	}
	if t != nil {
		u := t.UTC()
		t = &u
	}
	return t, nil
}

// SessionSandboxUsed records that the session's sandbox, if it has one, was used at now:
// it runs, and its idle time counts from now.
func (s *Store) SessionSandboxUsed(ctx context.Context, id uuid.UUID, now time.Time) error {
	if _, err := s.q.SessionSandboxUsed(ctx, s.db, queries.SessionSandboxUsedParams{ID: id, UsedAt: &now}); err != nil {
		return fmt.Errorf("mark sandbox of session %s used: %w", id, mapErr(err))
	}
	return nil
}

// SessionSandboxPaused records that the session's sandbox sandboxID was paused at now,
// unless it was paused already (the earlier pause counts) or is no longer the session's.
func (s *Store) SessionSandboxPaused(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time) error {
	if _, err := s.q.SessionSandboxPause(ctx, s.db, queries.SessionSandboxPauseParams{ID: id, SandboxID: &sandboxID, PausedAt: &now}); err != nil {
		return fmt.Errorf("mark sandbox of session %s paused: %w", id, mapErr(err))
	}
	return nil
}

// SessionSandboxPauseIdle records that the session's sandbox sandboxID is paused at now,
// if it still is the session's, runs, and was last used no later than idleBefore. It
// reports whether it did: false means the janitor must leave the sandbox alone.
func (s *Store) SessionSandboxPauseIdle(ctx context.Context, id uuid.UUID, sandboxID string, idleBefore, now time.Time) (bool, error) {
	n, err := s.q.SessionSandboxPauseIdle(ctx, s.db, queries.SessionSandboxPauseIdleParams{
		ID: id, SandboxID: &sandboxID, PausedAt: &now, IdleBefore: &idleBefore,
	})
	if err != nil {
		return false, fmt.Errorf("pause sandbox of session %s: %w", id, mapErr(err))
	}
	return n == 1, nil
}

// SessionSandboxKilled forgets the session's sandbox sandboxID, killed at now, if it is
// still the session's and has been paused since no later than pausedBefore; the
// session's next tool call creates a new one. It reports whether it did.
func (s *Store) SessionSandboxKilled(ctx context.Context, id uuid.UUID, sandboxID string, pausedBefore, now time.Time) (bool, error) {
	n, err := s.q.SessionSandboxKill(ctx, s.db, queries.SessionSandboxKillParams{
		ID: id, SandboxID: &sandboxID, KilledAt: &now, KillBefore: &pausedBefore,
	})
	if err != nil {
		return false, fmt.Errorf("forget sandbox of session %s: %w", id, mapErr(err))
	}
	return n == 1, nil
}

// SessionSandboxesIdle returns up to limit sessions whose sandbox runs and was last used
// no later than before, the longest idle first.
func (s *Store) SessionSandboxesIdle(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error) {
	return s.sandboxesIdle(ctx, before, limit, "")
}

func (s *Store) sandboxesIdle(ctx context.Context, before time.Time, limit int, node string) ([]chat.SessionSandbox, error) {
	rows, err := s.q.SessionSandboxesIdle(ctx, s.db, queries.SessionSandboxesIdleParams{IdleBefore: &before, Max: int32(limit), Node: node})
	if err != nil {
		return nil, fmt.Errorf("list idle sandboxes: %w", mapErr(err))
	}
	out := make([]chat.SessionSandbox, len(rows))
	for i, r := range rows {
		out[i] = chat.SessionSandbox{SessionID: r.ID, SandboxID: r.SandboxID}
	}
	return out, nil
}

// SessionSandboxesPaused returns up to limit sessions whose sandbox has been paused since
// no later than before, the longest paused first.
func (s *Store) SessionSandboxesPaused(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error) {
	return s.sandboxesPaused(ctx, before, limit, "")
}

func (s *Store) sandboxesPaused(ctx context.Context, before time.Time, limit int, node string) ([]chat.SessionSandbox, error) {
	rows, err := s.q.SessionSandboxesPaused(ctx, s.db, queries.SessionSandboxesPausedParams{PausedBefore: &before, Max: int32(limit), Node: node})
	if err != nil {
		return nil, fmt.Errorf("list paused sandboxes: %w", mapErr(err))
	}
	out := make([]chat.SessionSandbox, len(rows))
	for i, r := range rows {
		out[i] = chat.SessionSandbox{SessionID: r.ID, SandboxID: r.SandboxID}
	}
	return out, nil
}

// NodeSandboxes is the store as one node's sandboxes see it (the agent's SandboxStore
// and JanitorStore). Sandboxes are per node: a node's provider knows only the sandboxes
// it made. A session whose sandbox another node made (it moved here) has none here, and
// counts as one whose sandbox was killed: it gets a new one, and its transcript says so.
// The janitor lists only this node's sandboxes.
type NodeSandboxes struct {
	*Store
	node func() string
}

// NodeSandboxes returns the store for the sandboxes of node (an id, "" for none).
func (s *Store) NodeSandboxes(node func() string) NodeSandboxes {
	return NodeSandboxes{Store: s, node: node}
}

func (n NodeSandboxes) elsewhere(r queries.SessionSandboxOfRow) bool {
	return r.SandboxID != "" && r.SandboxNode != "" && r.SandboxNode != n.node()
}

// SessionSandbox returns the session's sandbox, "" for none or another node's.
func (n NodeSandboxes) SessionSandbox(ctx context.Context, id uuid.UUID) (string, error) {
	r, err := n.q.SessionSandboxOf(ctx, n.db, id)
	if err != nil {
		return "", fmt.Errorf("get sandbox of session %s: %w", id, mapErr(err))
	}
	if n.elsewhere(r) {
		return "", nil
	}
	return r.SandboxID, nil
}

// SessionSandboxKilledAt is Store's, and for a sandbox another node made, when it was
// last used there.
func (n NodeSandboxes) SessionSandboxKilledAt(ctx context.Context, id uuid.UUID) (*time.Time, error) {
	r, err := n.q.SessionSandboxOf(ctx, n.db, id)
	if err != nil {
		return nil, fmt.Errorf("get sandbox of session %s: %w", id, mapErr(err))
	}
	t := r.SandboxKilledAt
	if n.elsewhere(r) {
		t = r.SandboxUsedAt
	}
	if t != nil {
		u := t.UTC()
		t = &u
	}
	return t, nil
}

// SessionSetSandbox is Store's, recording this node as the sandbox's.
func (n NodeSandboxes) SessionSetSandbox(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time) error {
	return n.setSandbox(ctx, id, sandboxID, now, n.node())
}

// SessionSandboxesIdle is Store's for this node's sandboxes.
func (n NodeSandboxes) SessionSandboxesIdle(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error) {
	return n.sandboxesIdle(ctx, before, limit, n.node())
}

// SessionSandboxesPaused is Store's for this node's sandboxes.
func (n NodeSandboxes) SessionSandboxesPaused(ctx context.Context, before time.Time, limit int) ([]chat.SessionSandbox, error) {
	return n.sandboxesPaused(ctx, before, limit, n.node())
}
