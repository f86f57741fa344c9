package store_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// The transcript is a tree: the active leaf follows messages written under it, a message
// written elsewhere leaves it, and reads of a branch carry where each message stands
// among its siblings.
func TestBranchesFollowTheActiveLeaf(t *testing.T) {
	s, b := setup(t)
	id := b.session.ID
	pos := int64(0)
	msg := func(run chat.Run, parent *uuid.UUID, role chat.Role, content string) chat.Message {
		pos++
		m := chat.Message{ID: uuid.New(), SessionID: id, RunID: &run.ID, ParentID: parent, Position: pos, Role: role, Content: content, Status: chat.MessageComplete, CreatedAt: b.now}
		if role == chat.RoleUser {
			require.NoError(t, s.RunStart(b.ctx, run, m, 0))
		} else {
			require.NoError(t, s.MessageInsert(b.ctx, m))
		}
		return m
	}
	newRun := func() chat.Run {
		return chat.Run{ID: uuid.New(), SessionID: id, RequestID: uuid.NewString(), Status: chat.RunRunning, StartedAt: b.now, LastActivityAt: b.now}
	}
	leaf := func() *uuid.UUID {
		sess, err := s.SessionGet(b.ctx, id)
		require.NoError(t, err)
		return sess.ActiveLeaf
	}
	contents := func(ms []chat.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Content)
		}
		return out
	}

	r1 := newRun()
	q1 := msg(r1, nil, chat.RoleUser, "q1")
	a1 := msg(r1, &q1.ID, chat.RoleAssistant, "a1")
	require.Equal(t, a1.ID, *leaf(), "the answer grows the path")
	r2 := newRun()
	q2 := msg(r2, &a1.ID, chat.RoleUser, "q2")
	a2 := msg(r2, &q2.ID, chat.RoleAssistant, "a2")

	// An edit of q2 starts a branch under a1 and is the leaf at once.
	r3 := newRun()
	q2b := msg(r3, &a1.ID, chat.RoleUser, "q2 edited")
	require.Equal(t, q2b.ID, *leaf())
	// A late write on the old branch leaves the path alone.
	late := msg(r2, &a2.ID, chat.RoleAssistant, "late")
	require.Equal(t, q2b.ID, *leaf())
	a2b := msg(r3, &q2b.ID, chat.RoleAssistant, "a2 edited")

	path, more, err := s.MessagesBefore(b.ctx, id, 0, 10)
	require.NoError(t, err)
	require.False(t, more)
	require.Equal(t, []string{"q1", "a1", "q2 edited", "a2 edited"}, contents(path))
	require.Nil(t, path[0].Branch)
	require.Equal(t, &chat.Branch{Siblings: []uuid.UUID{q2.ID, q2b.ID}, Index: 1}, path[2].Branch)
	require.Equal(t, a1.ID, *path[2].ParentID)

	// Paging the path by position.
	page, more, err := s.MessagesBefore(b.ctx, id, q2b.Position, 1)
	require.NoError(t, err)
	require.True(t, more)
	require.Equal(t, []string{"a1"}, contents(page))

	// Another branch, read without selecting it.
	old, _, err := s.MessagesPath(b.ctx, id, &late.ID, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q1", "a1", "q2", "a2", "late"}, contents(old))
	require.Equal(t, 0, old[2].Branch.Index)

	// Selecting q2 shows its newest message; a message of another session is no leaf.
	below, err := s.MessageNewestBelow(b.ctx, id, q2.ID)
	require.NoError(t, err)
	require.Equal(t, late.ID, below)
	other := newSession(t, s, b, "alice")
	_, err = s.MessageNewestBelow(b.ctx, other, q2.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorIs(t, s.SessionSetLeaf(b.ctx, other, &q2.ID), store.ErrNotFound)
	none, _, err := s.MessagesPath(b.ctx, other, &q2.ID, 0, 10)
	require.NoError(t, err)
	require.Empty(t, none)

	require.NoError(t, s.SessionSetLeaf(b.ctx, id, &below))
	path, _, err = s.MessagesBefore(b.ctx, id, 0, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"q1", "a1", "q2", "a2", "late"}, contents(path))
	kids, err := s.MessageChildren(b.ctx, id, &a1.ID)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{q2.ID, q2b.ID}, kids)
	roots, err := s.MessageChildren(b.ctx, id, nil)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{q1.ID}, roots)

	// A regeneration makes the user message the leaf; the new answer grows it.
	r4 := newRun()
	r4.RetryOf = &r2.ID
	require.NoError(t, s.RunStartRetry(b.ctx, r4, q2.ID, 0))
	require.Equal(t, q2.ID, *leaf())
	pos++
	open := chat.Message{ID: uuid.New(), SessionID: id, RunID: &r4.ID, ParentID: &q2.ID, Position: pos, Role: chat.RoleAssistant, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(b.ctx, open))
	require.Equal(t, open.ID, *leaf())
	// A segment that stored nothing goes, and the leaf goes back to its parent.
	deleted, err := s.MessageDeleteEmpty(b.ctx, open.ID)
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, q2.ID, *leaf())
	_ = a2b
}
