package ws_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/wstest"
)

func uuidParse(s string) (uuid.UUID, error) { return uuid.Parse(s) }

func TestChatStreamsAndStores(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(
		script.Text("Hello", ", ", "world"),
		script.ToolStart("c1", "lookup", `{"q": "x"}`),
		script.ToolOutput("c1", "line 1\n", "line 2\n"),
		script.ToolEnd("c1", "found"),
		script.Text(" and", " more"),
	)})
	c := e.session()
	ack := c.Chat("r1", "hi there")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.False(t, ack.Duplicate)
	done := c.ReadTerminal()
	require.Equal(t, "chat.done", done.Type)
	require.Equal(t, "done", done.Run.Status)

	msgs := c.State.Sorted()
	require.Len(t, msgs, 4)
	require.Equal(t, "hi there", msgs[0].Content)
	require.Equal(t, "Hello, world", msgs[1].Content)
	require.Equal(t, "complete", msgs[1].Status)
	require.Equal(t, "found", *msgs[2].Tool.Output)
	require.Equal(t, "ok", msgs[2].Tool.Status)
	require.Equal(t, " and more", msgs[3].Content)
	e.requireConverged(c.State.SessionID, c)

	// A second tab that arrives afterwards gets the same state from a snapshot.
	other := e.join(c.State.SessionID)
	require.Empty(t, wstest.Diff(c.State.Sorted(), other.State.Sorted()))
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// The answer to a hello echoes its requestId, like every reply.
func TestHelloEchoesRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("ok"))})
	c := e.dial()
	c.Send(map[string]any{"type": "hello", "requestId": "h1"})
	snap := c.Read()
	require.Equal(t, "snapshot", snap.Type)
	require.Equal(t, "h1", snap.RequestID)

	again := e.dial()
	again.State = c.State
	again.Send(map[string]any{"type": "hello", "requestId": "h2", "sessionId": c.State.SessionID, "epoch": c.State.Epoch, "lastSeq": c.State.LastSeq})
	resumed := again.Read()
	require.Equal(t, "resumed", resumed.Type)
	require.Equal(t, "h2", resumed.RequestID)
}

// requestId is limited in characters, not bytes.
func TestRequestIDLengthIsInCharacters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("ok"))})
	c := e.session()
	id := strings.Repeat("é", 128) // 256 bytes
	ack := c.Chat(id, "hi")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	require.Equal(t, id, ack.RequestID)
	c.ReadTerminal()

	c.SendUnchecked(map[string]any{"type": "chat.send", "requestId": id + "é", "content": "hi"})
	f := c.ReadType("error")
	require.Equal(t, "bad_request", f.Code)
}

// Tool input that is not JSON is refused to the agent as bad input, not turned into a
// storage failure.
func TestUnstorableToolInputIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{agent: script.New(script.Text("before"), script.ToolStart("c1", "t", `{"a": `))})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "go").Type)
	end := c.ReadTerminal()
	require.Equal(t, "chat.error", end.Type)
	require.Equal(t, "bad_request", end.Run.Error.Code)
	require.Contains(t, end.Run.Error.Message, "c1")
	e.requireConverged(c.State.SessionID, c)
}

// Tool input a model sends that jsonb refuses (a NUL, a lone surrogate, invalid UTF-8)
// is cleaned where it enters: U+FFFD instead, the same in every tab and in the database.
func TestToolInputIsCleanedToBeStorable(t *testing.T) {
	t.Parallel()
	for name, input := range map[string]string{
		"NUL in a string": `{"a": "x\u0000y"}`,
		"NUL in a key":    `{"\u0000": 1}`,
		"lone surrogate":  `{"a": "\ud800"}`,
		"invalid UTF-8":   "{\"a\": \"\xff\"}",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{agent: script.New(script.Text("before"), script.Tool("c1", "t", input, "ok"))})
			c := e.session()
			require.Equal(t, "ack", c.Chat("r1", "go").Type)
			end := c.ReadTerminal()
			require.Equal(t, "chat.done", end.Type, "%s", end.Raw)
			var call *wstest.Message
			for _, m := range c.State.Messages {
				if m.Tool != nil {
					call = m
				}
			}
			require.NotNil(t, call)
			var v any
			require.NoError(t, json.Unmarshal(call.Tool.Input, &v))
			require.Contains(t, fmt.Sprint(v), "\uFFFD", "%s", call.Tool.Input)
			e.requireConverged(c.State.SessionID, c)
		})
	}
}
