package aisdk

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
)

// An edit's requestId is derived from the id useChat keeps for the message and from the
// text: the same for a retried POST, another for other text, within chat's bound for any
// id, and every edit of a message (an edit of an edit included) is recognised under the
// id useChat kept.
func TestEditKeys(t *testing.T) {
	k := editKey("u-1", "two, edited")
	require.Equal(t, k, editKey("u-1", "two, edited"))
	require.NotEqual(t, k, editKey("u-1", "two, again"))
	require.NotEqual(t, k, editKey("u-2", "two, edited"))
	require.True(t, strings.HasPrefix(k, "edit:u-1:"), k)
	require.Equal(t, "u-1", rootOf(k))
	require.Equal(t, k, editKey(k, "two, edited"), "an edit of the edit, named by its own id, keeps the root")
	require.True(t, sameMessage(k, "u-1"))
	require.True(t, sameMessage(editKey(k, "other"), "u-1"))
	require.False(t, sameMessage(k, "u-2"))
	require.False(t, sameMessage("edit-u-1", "u-1"))

	long := strings.Repeat("x", chat.MaxRequestIDLen)
	lk := editKey(long, "text")
	require.True(t, chat.ValidRequestID(lk), "%d characters", len(lk))
	require.True(t, sameMessage(lk, long))
	require.True(t, chat.ValidRequestID("regenerate:"+keyRoot(long)+"#100"))
}

// The transcript marks each message at a branch point: a user message with its own
// Branch, an answer with its run's first message's; the others carry no metadata.
func TestUIMessagesCarryBranchPoints(t *testing.T) {
	run1, run2 := uuid.New(), uuid.New()
	q1, q1b := uuid.New(), uuid.New()
	a1, a1b := uuid.New(), uuid.New()
	msgs := []chat.Message{
		{ID: q1, RunID: &run1, RequestID: "u-1", Role: chat.RoleUser, Content: "one", Branch: &chat.Branch{Siblings: []uuid.UUID{q1b, q1}, Index: 1}},
		{ID: a1, RunID: &run2, RequestID: "regenerate:x", Role: chat.RoleAssistant, Kind: chat.KindText, Content: "a", Branch: &chat.Branch{Siblings: []uuid.UUID{a1b, a1}, Index: 1}},
		{ID: uuid.New(), RunID: &run2, RequestID: "regenerate:x", Role: chat.RoleAssistant, Kind: chat.KindText, Content: "b"},
		{ID: uuid.New(), RunID: &run2, RequestID: "u-2", Role: chat.RoleUser, Content: "two"},
	}
	out := UIMessages(msgs, nil)
	require.Len(t, out, 3)
	require.Equal(t, map[string]any{"chatd": map[string]any{"branch": map[string]any{
		"index": 1, "count": 2, "siblings": []string{q1b.String(), q1.String()},
	}}}, out[0]["metadata"])
	require.Equal(t, run2.String(), out[1]["id"])
	require.Equal(t, map[string]any{"chatd": map[string]any{"branch": map[string]any{
		"index": 1, "count": 2, "siblings": []string{a1b.String(), a1.String()},
	}}}, out[1]["metadata"])
	require.NotContains(t, out[2], "metadata")
}

// A regenerated answer's stream says its branch point once, as message-metadata before
// its first part, live or caught up, with what the transcript's metadata holds.
func TestStreamSendsTheAnswersBranchPoint(t *testing.T) {
	run := uuid.New()
	first := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Status: chat.MessageStreaming,
		Branch: &chat.Branch{Siblings: []uuid.UUID{uuid.New(), uuid.Nil}, Index: 1}}
	first.Branch.Siblings[1] = first.ID
	second := chat.Message{ID: uuid.New(), RunID: &run, Role: chat.RoleAssistant, Kind: chat.KindText, Status: chat.MessageStreaming}
	want := UIMessages([]chat.Message{first}, nil)[0]["metadata"]

	live := newEncoder(run)
	var stream []byte
	for _, ev := range []*conversation.Event{
		{Type: conversation.EventChatStarted, RunID: run},
		{Type: conversation.EventSegmentStarted, RunID: run, Message: &first},
		{Type: conversation.EventSegmentEnded, RunID: run, MessageID: first.ID},
		{Type: conversation.EventSegmentStarted, RunID: run, Message: &second},
		{Type: conversation.EventChatDone, RunID: run},
	} {
		stream = append(stream, live.event(ev)...)
	}
	chunks, _ := chunksOf(t, string(stream))
	require.Equal(t, "message-metadata", chunks[2]["type"])
	require.Equal(t, "text-start", chunks[3]["type"])
	require.JSONEq(t, mustJSON(t, want), mustJSON(t, chunks[2]["messageMetadata"]))
	n := 0
	for _, c := range chunks {
		if c["type"] == "message-metadata" {
			n++
		}
	}
	require.Equal(t, 1, n)

	caught := newEncoder(run)
	frames, err := caught.catchUp(conversation.CatchUp{Snapshot: &conversation.Snapshot{
		Messages: []chat.Message{first, second}, ActiveRun: &chat.Run{ID: run, Status: chat.RunRunning},
	}})
	require.NoError(t, err)
	chunks, _ = chunksOf(t, string(frames[0]))
	require.Equal(t, []any{"start", "start-step", "message-metadata", "text-start"}, []any{chunks[0]["type"], chunks[1]["type"], chunks[2]["type"], chunks[3]["type"]})
	require.JSONEq(t, mustJSON(t, want), mustJSON(t, chunks[2]["messageMetadata"]))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
