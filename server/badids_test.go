package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/transport/wstest"
)

// Ids that PostgreSQL's text cannot hold (not UTF-8, or with NUL), wherever a client
// gives one: a path of the AI SDK's endpoints or the HTTP API, the JSON of a request's
// body, a WebSocket frame. Each is answered bad_request (400 over HTTP) where it enters,
// never storage (503, "the database is unavailable"), and no statement reaches the
// database with it: chatd_db_statement_errors_total stays 0. JSON with such bytes is
// refused as a whole: encoding/json would quietly make each of them U+FFFD, turning two
// different requestIds into one. The server serves on as before.
func TestIDsThatAreNotUTF8(t *testing.T) {
	m, _ := startInProcess(t, map[string]string{"CHATD_DEMO_DELAY": "0s"})
	base := "http://" + m.Addr()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	// badRequest sends a request and requires a 400 bad_request whose message says msg.
	badRequest := func(method, path string, body []byte, msg string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
		require.NoError(t, err)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s %s: %s", method, path, raw)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(raw, &e), "%s %s: %s", method, path, raw)
		require.Equal(t, "bad_request", e.Error.Code, "%s %s: %s", method, path, raw)
		require.Contains(t, e.Error.Message, msg, "%s %s: %s", method, path, raw)
	}
	user := func(chatID, msgID string) []byte {
		return []byte(`{"id":"` + chatID + `","trigger":"submit-message","messages":[{"id":"` + msgID +
			`","role":"user","parts":[{"type":"text","text":"hi"}]}]}`)
	}

	// The AI SDK's endpoints: the chat id in the path (percent-encoded bytes that are
	// not UTF-8, or a NUL), and ids in the JSON bodies.
	for _, id := range []string{"%FF", "chat-%FF", "%C3", "%ED%A0%80"} {
		badRequest("GET", "/v1/aisdk/chat/"+id, nil, "the chat id is not valid UTF-8")
		badRequest("GET", "/v1/aisdk/chat/"+id+"/stream", nil, "the chat id is not valid UTF-8")
		badRequest("POST", "/v1/aisdk/chat/"+id+"/stop", nil, "the chat id is not valid UTF-8")
		badRequest("POST", "/v1/aisdk/chat/"+id+"/approve", []byte(`{"toolCallId":"c1","approved":true}`), "the chat id is not valid UTF-8")
		badRequest("POST", "/v1/aisdk/chat/"+id+"/branch", []byte(`{"messageId":"0193a0b4-7c1e-7000-8000-000000000001"}`), "the chat id is not valid UTF-8")
		badRequest("GET", "/v1/aisdk/chat/"+id+"?through=0193a0b4-7c1e-7000-8000-000000000001", nil, "the chat id is not valid UTF-8")
	}
	badRequest("GET", "/v1/aisdk/chat/a%00b", nil, "the chat id contains a NUL character")
	badRequest("POST", "/v1/aisdk/chat", user("chat-\xff", "m1"), "the body is not valid UTF-8")
	badRequest("POST", "/v1/aisdk/chat", user("chat-1", "m\xff"), "the body is not valid UTF-8")
	badRequest("POST", "/v1/aisdk/chat", user(`chat\u0000`, "m1"), "the chat id contains a NUL character")
	badRequest("POST", "/v1/aisdk/chat", user("chat-1", `m\u0000`), "the last message's id contains a NUL character")
	badRequest("POST", "/v1/aisdk/chat", []byte(`{"id":"chat-1","trigger":"regenerate-message","messageId":"m\u0000","messages":[]}`), "messageId contains a NUL character")
	badRequest("POST", "/v1/aisdk/chat/chat-1/approve", []byte("{\"toolCallId\":\"c\xff\",\"approved\":true}"), "the body is not valid UTF-8")
	badRequest("POST", "/v1/aisdk/chat/chat-1/approve", []byte(`{"toolCallId":"c\u0000","approved":true}`), "toolCallId contains a NUL character")
	badRequest("POST", "/v1/aisdk/chat/chat-1/branch", []byte("{\"messageId\":\"m\xff\"}"), "the body is not valid UTF-8")
	badRequest("POST", "/v1/aisdk/chat/chat-1/branch", []byte(`{"messageId":"m\u0000"}`), "messageId must be a chatd message id (a UUID, as in metadata.chatd.branch.siblings) or a UIMessage id")
	badRequest("GET", "/v1/aisdk/chat/chat-1?through=%FF", nil, "through must be a chatd message id")

	// The HTTP API: a session id in the path, a body.
	badRequest("PATCH", "/v1/sessions/%FF", []byte(`{"title":"x"}`), "the session id is not valid UTF-8")
	badRequest("DELETE", "/v1/sessions/%FF", nil, "the session id is not valid UTF-8")
	badRequest("PATCH", "/v1/sessions/"+uuid.NewString(), []byte("{\"title\":\"\xff\"}"), "the body is not valid UTF-8")

	// The WebSocket: frames with ids that are not UTF-8 are answered error bad_request,
	// and the connection stays open. Two requestIds that differ only in such bytes are
	// two refusals, not one run and a duplicate.
	c := wstest.Dial(t, "ws://"+m.Addr()+"/v1/ws", nil)
	wsBad := func(frame string, wantReqID string) {
		t.Helper()
		c.SendRaw(websocket.MessageText, []byte(frame))
		f := c.Read()
		require.Equal(t, "error", f.Type, "reply to %q: %s", frame, f.Raw)
		require.Equal(t, "bad_request", f.Code, "reply to %q: %s", frame, f.Raw)
		require.Equal(t, wantReqID, f.RequestID, "reply to %q: %s", frame, f.Raw)
		require.Contains(t, f.ErrorText, "not valid UTF-8", "reply to %q: %s", frame, f.Raw)
	}
	wsBad("{\"type\":\"hello\",\"requestId\":\"h1\",\"sessionId\":\"\xff\"}", "h1")
	snap := c.Hello("")
	wsBad("{\"type\":\"chat.send\",\"requestId\":\"r\xfe\",\"content\":\"one\"}", "")
	wsBad("{\"type\":\"chat.send\",\"requestId\":\"r\xff\",\"content\":\"two\"}", "")
	wsBad("{\"type\":\"chat.send\",\"requestId\":\"r3\",\"content\":\"bad \xff text\"}", "r3")
	wsBad("{\"type\":\"tool.decide\",\"requestId\":\"d1\",\"toolCallId\":\"c\xff\",\"decision\":\"approve\"}", "d1")
	wsBad("{\"type\":\"chat.cancel\",\"requestId\":\"x1\",\"runId\":\"\xff\"}", "x1")
	wsBad("{\"type\":\"chat.resume\",\"requestId\":\"x2\",\"runId\":\"\xff\"}", "x2")
	ack := c.Chat("r4", "still here?")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	require.Len(t, sessionMessages(t, openStore(t, m.cfg.DatabaseURL), snap.SessionID), 2, "only r4's message and its answer are stored")
	c.WS.CloseNow()

	// None of it reached the database as a statement it refused.
	s := scrapeMetrics(t, m)
	require.Contains(t, s, "chatd_db_statement_errors_total")
	for _, series := range s["chatd_db_statement_errors_total"].GetMetric() {
		require.Zero(t, series.GetCounter().GetValue(), "database errors: %v", series)
	}
}
