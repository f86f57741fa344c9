package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/queries"
)

// SessionSetSandbox records the session's sandbox ("" for none), new at now: used now
// and running. The session's earlier sandboxes are released (their workspaces are
// removed once the retention has passed) and the new one's workspace is recorded, in the
// same transaction. It returns ErrNotFound for an unknown or deleted session.
func (s *Store) SessionSetSandbox(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time) error {
	return s.setSandbox(ctx, id, sandboxID, now, "")
}

func (s *Store) setSandbox(ctx context.Context, id uuid.UUID, sandboxID string, now time.Time, node string) error {
	var sb *string
	var used *time.Time
	if sandboxID != "" {
		sb, used = &sandboxID, &now
	}
	err := s.InTx(ctx, func(tx *Store) error {
		n, err := tx.q.SessionSetSandbox(ctx, tx.db, queries.SessionSetSandboxParams{ID: id, SandboxID: sb, UsedAt: used, Node: node})
		if err != nil {
			return err
		}
		if n == 0 {
			return ErrNotFound
		}
		return tx.q.WorkspaceRecord(ctx, tx.db, queries.WorkspaceRecordParams{Now: now, SessionID: id, SandboxID: sandboxID, Node: node})
	})
	if err != nil {
		return fmt.Errorf("set sandbox of session %s: %w", id, mapErr(err))
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
// session's next tool call creates a new one. Its workspace is released at now. It
// reports whether it did.
func (s *Store) SessionSandboxKilled(ctx context.Context, id uuid.UUID, sandboxID string, pausedBefore, now time.Time) (bool, error) {
	n, err := s.q.SessionSandboxKill(ctx, s.db, queries.SessionSandboxKillParams{
		ID: id, SandboxID: sandboxID, KilledAt: &now, KillBefore: &pausedBefore,
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

// WorkspacesDue returns up to limit workspaces to remove, the longest released first:
// those of deleted sessions, and those of sandboxes that stopped being their session's
// no later than releasedBefore (nil for none of those: workspaces are kept). A sandbox
// that is still its live session's is never one.
func (s *Store) WorkspacesDue(ctx context.Context, releasedBefore *time.Time, limit int) ([]chat.Workspace, error) {
	return s.workspacesDue(ctx, releasedBefore, limit, "")
}

func (s *Store) workspacesDue(ctx context.Context, releasedBefore *time.Time, limit int, node string) ([]chat.Workspace, error) {
	rows, err := s.q.WorkspacesDue(ctx, s.db, queries.WorkspacesDueParams{ReleasedBefore: releasedBefore, Max: int32(limit), Node: node})
	if err != nil {
		return nil, fmt.Errorf("list workspaces due for removal: %w", mapErr(err))
	}
	out := make([]chat.Workspace, len(rows))
	for i, r := range rows {
		out[i] = chat.Workspace{SessionID: r.SessionID, SandboxID: r.SandboxID, SessionDeleted: r.Deleted}
	}
	return out, nil
}

// SessionDeletedWorkspaces returns the sandbox ids of the workspaces the deleted
// session id had that are not removed yet; none for a session that is not deleted.
func (s *Store) SessionDeletedWorkspaces(ctx context.Context, id uuid.UUID) ([]string, error) {
	return s.deletedWorkspaces(ctx, id, "")
}

func (s *Store) deletedWorkspaces(ctx context.Context, id uuid.UUID, node string) ([]string, error) {
	ids, err := s.q.WorkspacesOfDeletedSession(ctx, s.db, queries.WorkspacesOfDeletedSessionParams{SessionID: id, Node: node})
	if err != nil {
		return nil, fmt.Errorf("list workspaces of deleted session %s: %w", id, mapErr(err))
	}
	return ids, nil
}

// WorkspaceRemoved forgets the workspace of sandboxID, removed from disk, and reports
// whether its record was there (false: another removal forgot it first). The record of
// a sandbox that is still its session's is kept.
func (s *Store) WorkspaceRemoved(ctx context.Context, sandboxID string) (bool, error) {
	n, err := s.q.WorkspaceDelete(ctx, s.db, sandboxID)
	if err != nil {
		return false, fmt.Errorf("forget workspace of sandbox %s: %w", sandboxID, mapErr(err))
	}
	return n == 1, nil
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

// WorkspacesDue is Store's for the workspaces of this node's sandboxes (and of those
// made by no node known).
func (n NodeSandboxes) WorkspacesDue(ctx context.Context, releasedBefore *time.Time, limit int) ([]chat.Workspace, error) {
	return n.workspacesDue(ctx, releasedBefore, limit, n.node())
}

// SessionDeletedWorkspaces is Store's for the workspaces of this node's sandboxes (and
// of those made by no node known).
func (n NodeSandboxes) SessionDeletedWorkspaces(ctx context.Context, id uuid.UUID) ([]string, error) {
	return n.deletedWorkspaces(ctx, id, n.node())
}

// SessionWorkspace returns the sandbox whose workspace is the session's newest (its
// sandbox's now, or the last it had, not removed yet), "" for none, and whether it is on
// this process's machine: made by node, or by no node known ("" takes any).
func (s *Store) SessionWorkspace(ctx context.Context, id uuid.UUID) (string, bool, error) {
	return s.sessionWorkspace(ctx, id, "")
}

func (s *Store) sessionWorkspace(ctx context.Context, id uuid.UUID, node string) (string, bool, error) {
	r, err := s.q.SessionWorkspaceNewest(ctx, s.db, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("look up the workspace of session %s: %w", id, mapErr(err))
	}
	return r.SandboxID, node == "" || r.Node == "" || r.Node == node, nil
}

// SessionWorkspace is Store's, here when this node made the sandbox.
func (n NodeSandboxes) SessionWorkspace(ctx context.Context, id uuid.UUID) (string, bool, error) {
	return n.sessionWorkspace(ctx, id, n.node())
}
