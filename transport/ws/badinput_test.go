package ws_test

import (
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

const (
	badInputMaxContent = 1000 // conversation.Config.MaxContentBytes of TestBadInput
	badInputReadLimit  = 4096 // ws.Config.ReadLimit of TestBadInput
)

// badInputCase is one bad frame sent on a connection of its own.
type badInputCase struct {
	name string
	// noHello sends the frame before any hello; otherwise the connection first says hello
	// to the shared session.
	noHello bool
	frame   any    // sent as JSON, unless raw is set
	raw     []byte // sent as it is
	binary  bool   // send raw in a binary frame
	// wantCode is the code of the error reply; "" when no reply may come before the close.
	wantCode string
	// wantReqID is the requestId the reply must echo; "" when it must carry none.
	wantReqID string
	wantMsg   string               // text the error message must contain
	wantClose websocket.StatusCode // close code that must follow; 0 when the connection stays open
}

// requireHistory sends a valid history.fetch and requires that the very next frame is its
// history reply: the connection is open and serving, and nothing else was queued on it.
func requireHistory(t *testing.T, c *wstest.Client, requestID string) wstest.Frame {
	t.Helper()
	c.Send(map[string]any{"type": "history.fetch", "requestId": requestID, "limit": 50})
	f := c.Read()
	require.Equal(t, "history", f.Type, "reply to history.fetch: %s", f.Raw)
	require.Equal(t, requestID, f.RequestID, "reply to history.fetch: %s", f.Raw)
	return f
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text("still", " streaming", " fine")),
		conv:     func(c *conversation.Config) { c.MaxContentBytes = badInputMaxContent },
		wsConfig: func(c *ws.Config) { c.ReadLimit = badInputReadLimit },
	})

	// The bystander watches the session that every bad connection joins.
	bystander := e.session()
	sid := bystander.State.SessionID
	require.NotEmpty(t, sid)

	bigPrefix := `{"type":"chat.send","requestId":"big","content":"`
	bigSuffix := `"}`
	bigFrame := []byte(bigPrefix + strings.Repeat("x", 5000-len(bigPrefix)-len(bigSuffix)) + bigSuffix)
	require.Len(t, bigFrame, 5000)

	send := func(requestID string, content any) map[string]any {
		return map[string]any{"type": "chat.send", "requestId": requestID, "content": content}
	}

	cases := []badInputCase{
		// Frames that are not JSON objects.
		{name: "malformed JSON", raw: []byte(`{"type":`), wantCode: "bad_request"},
		{name: "JSON array", raw: []byte(`[]`), wantCode: "bad_request"},
		{name: "JSON string", raw: []byte(`"x"`), wantCode: "bad_request"},
		{name: "JSON number", raw: []byte(`42`), wantCode: "bad_request"},
		{name: "JSON null", raw: []byte(`null`), wantCode: "bad_request"},
		{name: "binary frame", raw: []byte(`{"type":"history.fetch"}`), binary: true, wantCode: "bad_request"},

		// Type.
		{name: "missing type", frame: map[string]any{"requestId": "no-type"}, wantCode: "bad_request", wantReqID: "no-type"},
		{name: "unknown type", frame: map[string]any{"type": "chat.explode", "requestId": "unknown-1"}, wantCode: "unknown_type", wantReqID: "unknown-1"},

		// chat.send.
		{name: "chat.send without requestId", frame: map[string]any{"type": "chat.send", "content": "hi"}, wantCode: "bad_request"},
		{name: "chat.send with empty requestId", frame: send("", "hi"), wantCode: "bad_request"},
		{name: "chat.send with requestId of 129 chars", frame: send(strings.Repeat("r", 129), "hi"), wantCode: "bad_request"},
		{name: "chat.send with non-string requestId", frame: map[string]any{"type": "chat.send", "requestId": 5, "content": "hi"}, wantCode: "bad_request"},
		{name: "chat.send with empty content", frame: send("empty", ""), wantCode: "bad_request", wantReqID: "empty"},
		{name: "chat.send with whitespace content", frame: send("blank", " \t\n  "), wantCode: "bad_request", wantReqID: "blank"},
		{name: "chat.send without content", frame: map[string]any{"type": "chat.send", "requestId": "no-content"}, wantCode: "bad_request", wantReqID: "no-content"},
		{name: "chat.send with content over the limit", frame: send("too-big", strings.Repeat("x", badInputMaxContent+1)), wantCode: "too_large", wantReqID: "too-big"},
		{name: "chat.send with NUL in content", frame: send("nul", "a\u0000b"), wantCode: "bad_request", wantReqID: "nul"},
		{name: "wrong field type", frame: send("typed", 5), wantCode: "bad_request", wantReqID: "typed"},

		// Frames that are not UTF-8: encoding/json would make the bytes U+FFFD, so two such
		// requestIds would be one. A requestId is echoed unless it holds the bytes.
		{name: "chat.send with a requestId that is not UTF-8", raw: []byte("{\"type\":\"chat.send\",\"requestId\":\"r\xff\",\"content\":\"hi\"}"), wantCode: "bad_request", wantMsg: "not valid UTF-8"},
		{name: "chat.send with content that is not UTF-8", raw: []byte("{\"type\":\"chat.send\",\"requestId\":\"utf8\",\"content\":\"h\xc3\"}"), wantCode: "bad_request", wantReqID: "utf8", wantMsg: "not valid UTF-8"},
		{name: "hello with a sessionId that is not UTF-8", noHello: true, raw: []byte("{\"type\":\"hello\",\"requestId\":\"sid-utf8\",\"sessionId\":\"\xff\"}"), wantCode: "bad_request", wantReqID: "sid-utf8", wantMsg: "not valid UTF-8"},
		{name: "tool.decide with a toolCallId that is not UTF-8", raw: []byte("{\"type\":\"tool.decide\",\"requestId\":\"td-utf8\",\"toolCallId\":\"c\xed\xa0\x80\",\"decision\":\"approve\"}"), wantCode: "bad_request", wantReqID: "td-utf8", wantMsg: "not valid UTF-8"},

		// Protocol violations.
		{name: "command before hello", noHello: true, frame: send("early", "hi"), wantCode: "bad_request", wantReqID: "early", wantClose: 4000},
		{name: "second hello", frame: map[string]any{"type": "hello", "requestId": "again", "sessionId": sid}, wantCode: "bad_request", wantReqID: "again", wantClose: 4000},
		{name: "frame over the read limit", raw: bigFrame, wantClose: websocket.StatusMessageTooBig},

		// hello.
		{name: "hello with invalid sessionId", noHello: true, frame: map[string]any{"type": "hello", "requestId": "bad-sid", "sessionId": "not-a-uuid"}, wantCode: "bad_request", wantReqID: "bad-sid"},
		{name: "hello with negative lastSeq", noHello: true, frame: map[string]any{"type": "hello", "requestId": "neg-seq", "sessionId": sid, "epoch": "some-epoch", "lastSeq": -1}, wantCode: "bad_request", wantReqID: "neg-seq"},

		// history.fetch.
		{name: "history.fetch with limit 0", frame: map[string]any{"type": "history.fetch", "requestId": "limit-0", "limit": 0}, wantCode: "bad_request", wantReqID: "limit-0"},
		{name: "history.fetch with limit 201", frame: map[string]any{"type": "history.fetch", "requestId": "limit-201", "limit": 201}, wantCode: "bad_request", wantReqID: "limit-201"},
		{name: "history.fetch with before 0", frame: map[string]any{"type": "history.fetch", "requestId": "before-0", "before": 0}, wantCode: "bad_request", wantReqID: "before-0"},

		// chat.cancel.
		{name: "chat.cancel with no active run", frame: map[string]any{"type": "chat.cancel", "requestId": "cancel-none"}, wantCode: "no_run", wantReqID: "cancel-none"},
		{name: "chat.cancel with invalid runId", frame: map[string]any{"type": "chat.cancel", "requestId": "cancel-nope", "runId": "nope"}, wantCode: "bad_request", wantReqID: "cancel-nope"},

		// tool.decide.
		{name: "tool.decide without toolCallId", frame: map[string]any{"type": "tool.decide", "requestId": "td-no-id", "decision": "approve"}, wantCode: "bad_request", wantReqID: "td-no-id"},
		{name: "tool.decide with NUL in toolCallId", frame: map[string]any{"type": "tool.decide", "requestId": "td-nul", "toolCallId": "c\u0000", "decision": "approve"}, wantCode: "bad_request", wantReqID: "td-nul", wantMsg: "toolCallId contains a NUL"},
		{name: "tool.decide with unknown decision", frame: map[string]any{"type": "tool.decide", "requestId": "td-maybe", "toolCallId": "call-1", "decision": "maybe"}, wantCode: "bad_request", wantReqID: "td-maybe"},
		{name: "tool.decide with no pending approval", frame: map[string]any{"type": "tool.decide", "requestId": "td-ok", "toolCallId": "call-1", "decision": "approve"}, wantCode: "not_found", wantReqID: "td-ok"},

		// chat.resume.
		{name: "chat.resume without requestId", frame: map[string]any{"type": "chat.resume"}, wantCode: "bad_request"},
		{name: "chat.resume without runId", frame: map[string]any{"type": "chat.resume", "requestId": "resume-1"}, wantCode: "bad_request", wantReqID: "resume-1", wantMsg: "runId"},
		{name: "chat.resume with an unknown mode", frame: map[string]any{"type": "chat.resume", "requestId": "resume-2", "runId": "0193a2b4-7c1d-7000-8000-000000000001", "mode": "again"}, wantCode: "bad_request", wantReqID: "resume-2", wantMsg: "mode"},
		{name: "chat.resume of an unknown run", frame: map[string]any{"type": "chat.resume", "requestId": "resume-3", "runId": "0193a2b4-7c1d-7000-8000-000000000001"}, wantCode: "not_found", wantReqID: "resume-3"},
		{name: "chat.dismiss without runId", frame: map[string]any{"type": "chat.dismiss", "requestId": "dismiss-1"}, wantCode: "bad_request", wantReqID: "dismiss-1", wantMsg: "runId"},
		{name: "chat.dismiss of an unknown run", frame: map[string]any{"type": "chat.dismiss", "requestId": "dismiss-2", "runId": "0193a2b4-7c1d-7000-8000-000000000001"}, wantCode: "not_found", wantReqID: "dismiss-2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := wstest.Dial(t, e.URL, nil)
			defer c.WS.CloseNow()
			if !tc.noHello {
				c.Hello(sid)
			}

			switch {
			case tc.raw != nil && tc.binary:
				c.SendRaw(websocket.MessageBinary, tc.raw)
			case tc.raw != nil:
				c.SendRaw(websocket.MessageText, tc.raw)
			default:
				c.SendUnchecked(tc.frame) // the frames are bad on purpose
			}

			if tc.wantCode != "" {
				f := c.Read()
				require.Equal(t, "error", f.Type, "reply: %s", f.Raw)
				require.Equal(t, tc.wantCode, f.Code, "reply: %s", f.Raw)
				require.Equal(t, tc.wantReqID, f.RequestID, "requestId of the reply: %s", f.Raw)
				require.NotEmpty(t, strings.TrimSpace(f.ErrorText), "error reply without a message: %s", f.Raw)
				if tc.wantMsg != "" {
					require.Contains(t, f.ErrorText, tc.wantMsg, "reply: %s", f.Raw)
				}
			}

			if tc.wantClose != 0 {
				f, err := c.TryRead()
				require.Equal(t, tc.wantClose, websocket.CloseStatus(err),
					"want close %d; read returned frame %s and error %v", tc.wantClose, f.Raw, err)
				return
			}

			// The connection stays open and keeps serving; one that has not said hello yet
			// can still do so.
			if tc.noHello {
				snap := c.Hello(sid)
				require.Equal(t, "snapshot", snap.Type, "%s", snap.Raw)
				require.Equal(t, sid, snap.SessionID)
			}
			requireHistory(t, c, "still-open")
		})
	}

	// The bystander saw none of it: the next frame it gets is the reply to its own request,
	// and nothing was stored.
	h := requireHistory(t, bystander, "bystander-history")
	require.Empty(t, h.Messages, "bad input stored messages: %s", h.Raw)

	// A run it starts streams to the end, and every frame it gets belongs to that run.
	const reqID = "after-bad-input"
	startSeq := bystander.State.LastSeq
	bystander.Send(map[string]any{"type": "chat.send", "requestId": reqID, "content": "are you still there?"})
	// Replies are not ordered with events: read until both the ack and the end came.
	acked, ended := false, false
	for !acked || !ended {
		f := bystander.Read()
		if f.Type == "ack" {
			require.False(t, acked, "second ack: %s", f.Raw)
			require.Equal(t, reqID, f.RequestID, "%s", f.Raw)
			require.False(t, f.Duplicate, "%s", f.Raw)
			acked = true
			continue
		}
		require.True(t, f.Sequenced(), "unexpected frame on the bystander: %s", f.Raw)
		require.Equal(t, reqID, f.RequestID, "event of another run: %s", f.Raw)
		if f.Terminal() {
			require.False(t, ended, "second terminal event: %s", f.Raw)
			require.Equal(t, "chat.done", f.Type, "%s", f.Raw)
			require.Equal(t, "done", f.Run.Status)
			ended = true
		}
	}
	require.True(t, acked, "chat.send was not acknowledged")
	require.NotEmpty(t, bystander.Seen)
	require.Equal(t, startSeq+1, bystander.Seen[0].Seq, "first event of the run")

	msgs := bystander.State.Sorted()
	require.Len(t, msgs, 2)
	require.Equal(t, "are you still there?", msgs[0].Content)
	require.Equal(t, "still streaming fine", msgs[1].Content)
	require.Equal(t, "complete", msgs[1].Status)
	e.requireConverged(sid, bystander)
}
