package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
)

// due lists the sandbox ids of the workspaces due for removal with the given retention
// cut-off (nil: retention off), and says which are a deleted session's.
func due(t *testing.T, list func(*time.Time) ([]chat.Workspace, error), before *time.Time) []string {
	t.Helper()
	ws, err := list(before)
	require.NoError(t, err)
	out := []string{}
	for _, w := range ws {
		if w.SessionDeleted {
			out = append(out, w.SandboxID+" (deleted)")
		} else {
			out = append(out, w.SandboxID)
		}
	}
	return out
}

// Every sandbox a session has had is recorded until its workspace is removed: one the
// janitor killed and one replaced are released when that happens and come due once the
// retention has passed; a deleted session's all come due at once. A session's current
// sandbox never does.
func TestWorkspacesFollowTheirSession(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	list := func(before *time.Time) ([]chat.Workspace, error) { return s.WorkspacesDue(b.ctx, before, 100) }
	at := func(d time.Duration) *time.Time { t := b.now.Add(d); return &t }
	year := at(365 * 24 * time.Hour)
	other := newSession(t, s, b, "bob")
	require.NoError(t, s.SessionSetSandbox(b.ctx, other, "bob-1", b.now))

	require.NoError(t, s.SessionSetSandbox(b.ctx, id, "sb-1", b.now))
	require.Equal(t, []string{}, due(t, list, year), "a sandbox in use is never due")

	// The janitor kills sb-1 an hour in.
	require.NoError(t, s.SessionSandboxPaused(b.ctx, id, "sb-1", b.now))
	killed, err := s.SessionSandboxKilled(b.ctx, id, "sb-1", *at(time.Hour), *at(time.Hour))
	require.NoError(t, err)
	require.True(t, killed)
	require.Equal(t, []string{}, due(t, list, at(time.Hour-time.Second)), "not before the retention")
	require.Equal(t, []string{"sb-1"}, due(t, list, at(time.Hour)))
	require.Equal(t, []string{}, due(t, list, nil), "retention off: kept")

	// A new sandbox, then another that replaces it (the first was lost).
	require.NoError(t, s.SessionSetSandbox(b.ctx, id, "sb-2", *at(2 * time.Hour)))
	require.NoError(t, s.SessionSetSandbox(b.ctx, id, "sb-3", *at(3 * time.Hour)))
	require.Equal(t, []string{"sb-1"}, due(t, list, at(3*time.Hour-time.Second)))
	require.Equal(t, []string{"sb-1", "sb-2"}, due(t, list, at(3*time.Hour)), "the longest released first")
	ws, err := s.WorkspacesDue(b.ctx, year, 1)
	require.NoError(t, err)
	require.Len(t, ws, 1, "bounded")

	removed, err := s.WorkspaceRemoved(b.ctx, "sb-1")
	require.NoError(t, err)
	require.True(t, removed)
	removed, err = s.WorkspaceRemoved(b.ctx, "sb-1")
	require.NoError(t, err)
	require.False(t, removed, "forgotten already")
	removed, err = s.WorkspaceRemoved(b.ctx, "sb-3")
	require.NoError(t, err)
	require.False(t, removed, "the current one's record is kept")
	require.Equal(t, []string{"sb-2"}, due(t, list, year))
	deleted, err := s.SessionDeletedWorkspaces(b.ctx, id)
	require.NoError(t, err)
	require.Empty(t, deleted, "the session is not deleted")

	require.NoError(t, s.SessionDelete(b.ctx, "alice", id, *at(4 * time.Hour)))
	require.Equal(t, []string{"sb-2 (deleted)", "sb-3 (deleted)"}, due(t, list, nil), "a deleted session's go whatever the retention")
	deleted, err = s.SessionDeletedWorkspaces(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{"sb-2", "sb-3"}, deleted)
	for _, sb := range deleted {
		removed, err := s.WorkspaceRemoved(b.ctx, sb)
		require.NoError(t, err)
		require.True(t, removed, sb)
	}
	require.Equal(t, []string{}, due(t, list, year), "bob's sandbox in use never came due")
}

// Workspaces are per node, like sandboxes: each node lists only those of the sandboxes
// it made (and those made by no node known, from before nodes were recorded). A session
// that moves releases the old node's sandbox, which that node then removes.
func TestWorkspacesArePerNode(t *testing.T) {
	s, b := setup(t)
	a := s.NodeSandboxes(func() string { return "a" })
	other := s.NodeSandboxes(func() string { return "b" })
	id := b.session.ID
	later := b.now.Add(time.Hour)
	listA := func(before *time.Time) ([]chat.Workspace, error) { return a.WorkspacesDue(b.ctx, before, 10) }
	listB := func(before *time.Time) ([]chat.Workspace, error) { return other.WorkspacesDue(b.ctx, before, 10) }

	require.NoError(t, a.SessionSetSandbox(b.ctx, id, "bwrap-a", b.now))
	// The session moved to b, which gave it a sandbox of its own.
	require.NoError(t, other.SessionSetSandbox(b.ctx, id, "bwrap-b", later))
	require.Equal(t, []string{"bwrap-a"}, due(t, listA, &later))
	require.Equal(t, []string{}, due(t, listB, &later))

	// A sandbox recorded with no node (a store without nodes) is any node's.
	anon := newSession(t, s, b, "alice")
	require.NoError(t, s.SessionSetSandbox(b.ctx, anon, "local-anon", b.now))
	require.NoError(t, s.SessionDelete(b.ctx, "alice", anon, later))
	require.Equal(t, []string{"local-anon (deleted)"}, due(t, listB, nil))

	require.NoError(t, s.SessionDelete(b.ctx, "alice", id, later))
	gotA, err := a.SessionDeletedWorkspaces(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{"bwrap-a"}, gotA)
	gotB, err := other.SessionDeletedWorkspaces(b.ctx, id)
	require.NoError(t, err)
	require.Equal(t, []string{"bwrap-b"}, gotB)
}

// Sandboxes recorded for one session at once (two nodes that both think they hold it)
// leave exactly one workspace in use, the session's: every other is released, none is
// left in use behind a sandbox the session no longer names.
func TestConcurrentSandboxesLeaveOneInUse(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			require.NoError(t, s.SessionSetSandbox(b.ctx, id, fmt.Sprintf("sb-%d", i), b.now))
		})
	}
	wg.Wait()
	sess, err := s.SessionGet(b.ctx, id)
	require.NoError(t, err)
	var inUse []string
	rows, err := s.Pool().Query(b.ctx, "SELECT sandbox_id FROM workspaces WHERE session_id = $1 AND released_at IS NULL", id)
	require.NoError(t, err)
	for rows.Next() {
		var sb string
		require.NoError(t, rows.Scan(&sb))
		inUse = append(inUse, sb)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{sess.SandboxID}, inUse)
	ws, err := s.WorkspacesDue(b.ctx, &b.now, 100)
	require.NoError(t, err)
	require.Len(t, ws, 7)
}
