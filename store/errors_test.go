package store_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/store"
)

// What the database will never take is told apart from what may pass on a retry: a NUL
// in jsonb or text, and a lone surrogate, are ErrInvalid with their SQLSTATE; a message
// of a run that was deleted with its session is ErrGone. chat.CleanJSON makes the same
// JSON storable.
func TestPermanentErrorsAreClassified(t *testing.T) {
	s, b := setup(t)
	run, _ := startRun(t, s, b, "r1", 1)
	msg := func(pos int64, input string) chat.Message {
		return chat.Message{
			ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: pos, Role: chat.RoleTool,
			Status: chat.MessageStreaming, CreatedAt: b.now,
			Tool: &chat.ToolCall{CallID: "c", Name: "t", Input: json.RawMessage(input), Status: chat.ToolRunning},
		}
	}
	for _, bad := range []string{`{"a":"x\u0000y"}`, `{"a":"\ud800"}`} {
		err := s.MessageInsert(b.ctx, msg(2, bad))
		require.ErrorIs(t, err, store.ErrInvalid, bad)
		require.Regexp(t, `^22P0[25]$`, store.SQLState(err), "a data exception: %s", bad)
		require.NoError(t, s.MessageInsert(b.ctx, msg(2, string(chat.CleanJSON([]byte(bad))))), "cleaned: %s", bad)
		_, err = s.Pool().Exec(b.ctx, "DELETE FROM messages WHERE position = 2 AND session_id = $1", b.session.ID)
		require.NoError(t, err)
	}

	seg := chat.Message{ID: uuid.New(), SessionID: b.session.ID, RunID: &run.ID, Position: 2, Role: chat.RoleAssistant,
		Kind: chat.KindReasoning, Status: chat.MessageStreaming, CreatedAt: b.now}
	require.NoError(t, s.MessageInsert(b.ctx, seg))
	seg.Status, seg.UpdatedAt = chat.MessageComplete, b.now
	seg.ProviderData = json.RawMessage(`{"signature":"a\u0000b"}`)
	err := s.MessageUpdate(b.ctx, seg, chat.MessageStreaming)
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Equal(t, "22P05", store.SQLState(err))
	seg.ProviderData = chat.CleanJSON(seg.ProviderData)
	require.NoError(t, s.MessageUpdate(b.ctx, seg, chat.MessageStreaming))

	// The session is deleted (by another process, say): its runs go, and a message of
	// one of them can never be stored.
	require.NoError(t, s.SessionDelete(b.ctx, "alice", b.session.ID, b.now))
	err = s.MessageInsert(b.ctx, msg(3, `{}`))
	require.ErrorIs(t, err, store.ErrGone)
	require.Equal(t, "23503", store.SQLState(err))
}

// uuids are sent from their bytes (RegisterTypes): alone, in arrays and as pointers, they
// arrive as the same uuids, NULL included.
func TestUUIDsAreSentAsTheyAre(t *testing.T) {
	s, b := setup(t)
	ids := []uuid.UUID{uuid.New(), uuid.New()}
	var one uuid.UUID
	var many []uuid.UUID
	var none *uuid.UUID
	require.NoError(t, s.Pool().QueryRow(b.ctx, "SELECT $1::uuid, $2::uuid[], $3::uuid", ids[0], ids, (*uuid.UUID)(nil)).Scan(&one, &many, &none))
	require.Equal(t, ids[0], one)
	require.Equal(t, ids, many)
	require.Nil(t, none)
	var text string
	require.NoError(t, s.Pool().QueryRow(b.ctx, "SELECT $1::uuid::text", &ids[1]).Scan(&text))
	require.Equal(t, ids[1].String(), text)
}
