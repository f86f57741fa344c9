package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport/wstest"
)

type messagePage struct {
	Messages []wstest.Message `json:"messages"`
	HasMore  bool             `json:"hasMore"`
}

func (e *env) messages(token, id, query string) messagePage {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/sessions/"+id+"/messages"+query, token, nil)
	require.Equal(e.t, http.StatusOK, r.status, "%s", r.body)
	require.NoError(e.t, wstest.ValidateDefinition("MessagePage", r.body))
	var p messagePage
	require.NoError(e.t, json.Unmarshal(r.body, &p))
	return p
}

// The transcript over HTTP: the active path a page at a time, another branch read
// without selecting it, and a branch selected for every tab.
func TestBranchesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	c := e.chat(alice, "q1")
	id := c.State.SessionID
	e.send(c, "r2", "q2")
	q2 := c.State.Sorted()[2]
	other := e.tab(alice, id)

	// Edit q2 over the WebSocket: a second branch under the first answer.
	e.clock.Advance(1)
	c.Send(map[string]any{"type": "chat.send", "requestId": "r3", "content": "q2 again", "editOf": q2.ID})
	require.Equal(t, "ack", c.ReadReply("r3").Type)
	c.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r3" })
	other.Await(func(f wstest.Frame) bool { return f.Terminal() && f.RequestID == "r3" })

	page := e.messages(alice, id, "")
	require.Equal(t, []string{"q1", "ok: q1", "q2 again", "ok: q2 again"}, wstest.Contents(page.Messages))
	require.False(t, page.HasMore)
	require.Equal(t, 1, page.Messages[2].Branch.Index)
	page = e.messages(alice, id, "?limit=2")
	require.Equal(t, []string{"q2 again", "ok: q2 again"}, wstest.Contents(page.Messages))
	require.True(t, page.HasMore)
	page = e.messages(alice, id, "?limit=2&before=3")
	require.Equal(t, []string{"q1", "ok: q1"}, wstest.Contents(page.Messages))

	old := e.messages(alice, id, "?through="+q2.ID)
	require.Equal(t, []string{"q1", "ok: q1", "q2", "ok: q2"}, wstest.Contents(old.Messages))
	require.Equal(t, []string{"q1", "ok: q1", "q2 again", "ok: q2 again"}, wstest.Contents(e.messages(alice, id, "").Messages), "reading is not selecting")

	r := e.do(http.MethodPost, "/v1/sessions/"+id+"/branch", alice, []byte(`{"messageId":"`+q2.ID+`"}`))
	require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	other.Await(func(f wstest.Frame) bool { return f.Type == "branch.selected" })
	require.Equal(t, []string{"q1", "ok: q1", "q2", "ok: q2"}, wstest.Contents(other.State.Sorted()))
	require.Equal(t, wstest.Contents(e.messages(alice, id, "").Messages), wstest.Contents(other.State.Sorted()))

	for path, want := range map[string]int{
		"/v1/sessions/" + id + "/messages?through=nope":                http.StatusBadRequest,
		"/v1/sessions/" + id + "/messages?limit=0":                     http.StatusBadRequest,
		"/v1/sessions/" + id + "/messages?before=-1":                   http.StatusBadRequest,
		"/v1/sessions/" + id + "/messages?through=" + uuid.NewString(): http.StatusNotFound,
		"/v1/sessions/" + uuid.NewString() + "/messages":               http.StatusNotFound,
	} {
		r := e.do(http.MethodGet, path, alice, nil)
		require.Equal(t, want, r.status, "%s: %s", path, r.body)
	}
	require.Equal(t, http.StatusNotFound, e.do(http.MethodGet, "/v1/sessions/"+id+"/messages", bob, nil).status, "another user's session")
	for body, want := range map[string]int{
		`{}`:                   http.StatusBadRequest,
		`{"messageId":"nope"}`: http.StatusBadRequest,
		`{"messageId":"` + uuid.NewString() + `"}`: http.StatusNotFound,
	} {
		r := e.do(http.MethodPost, "/v1/sessions/"+id+"/branch", alice, []byte(body))
		require.Equal(t, want, r.status, "%s: %s", body, r.body)
	}
	require.Equal(t, http.StatusNotFound, e.do(http.MethodPost, "/v1/sessions/"+id+"/branch", bob, []byte(`{"messageId":"`+q2.ID+`"}`)).status)
}

// A session that no actor holds (the process restarted, or its actor was evicted) is read
// from the database: its actor loads it first, so the page is the stored active path,
// and the tab that says hello after the read sees the same.
func TestMessagesOfASessionNotInMemory(t *testing.T) {
	t.Parallel()
	first := newEnv(t, nil)
	c := first.chat(alice, "q1")
	id := c.State.SessionID
	first.send(c, "r2", "q2")
	want := wstest.Contents(c.State.Sorted())
	require.Equal(t, []string{"q1", "ok: q1", "q2", "ok: q2"}, want)
	c.WS.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, first.hub.Shutdown(ctx))

	e := newEnv(t, first.st) // the next process, on the same database
	page := e.messages(alice, id, "")
	require.Equal(t, want, wstest.Contents(page.Messages))
	require.False(t, page.HasMore)
	require.Equal(t, want, wstest.Contents(e.tab(alice, id).State.Sorted()), "the read left the actor's memory right")

	again := newEnv(t, first.st)
	page = e.messages(alice, id, "?limit=2")
	require.Equal(t, want[2:], wstest.Contents(page.Messages))
	require.True(t, page.HasMore)
	require.Equal(t, want, wstest.Contents(again.messages(alice, id, "").Messages), "a third node")
}
