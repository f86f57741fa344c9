package store_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
)

// Queued messages are kept per session in the order they came, a request id once, and
// deleted one by one.
func TestQueuedMessages(t *testing.T) {
	s, b := setup(t)
	q1 := chat.Queued{SessionID: b.session.ID, RequestID: "q1", Content: "first", CreatedAt: b.now}
	q2 := chat.Queued{SessionID: b.session.ID, RequestID: "q2", Content: "second", CreatedAt: b.now.Add(time.Second)}
	for _, q := range []chat.Queued{q2, q1} {
		ok, err := s.QueuedInsert(b.ctx, q)
		require.NoError(t, err)
		require.True(t, ok)
	}
	again := q1
	again.Content = "changed"
	ok, err := s.QueuedInsert(b.ctx, again)
	require.NoError(t, err)
	require.False(t, ok, "a request id is queued once")

	list, err := s.QueuedList(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, []chat.Queued{q1, q2}, list, "oldest first, as first stored")
	other, err := s.QueuedList(b.ctx, uuid.New())
	require.NoError(t, err)
	require.Empty(t, other)

	gone, err := s.QueuedDelete(b.ctx, uuid.New(), "q1")
	require.NoError(t, err)
	require.False(t, gone, "another session's message is not deleted")
	gone, err = s.QueuedDelete(b.ctx, b.session.ID, "q1")
	require.NoError(t, err)
	require.True(t, gone)
	gone, err = s.QueuedDelete(b.ctx, b.session.ID, "q1")
	require.NoError(t, err)
	require.False(t, gone)
	list, err = s.QueuedList(b.ctx, b.session.ID)
	require.NoError(t, err)
	require.Equal(t, []chat.Queued{q2}, list)
}
