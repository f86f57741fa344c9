package transport_test

import (
	"errors"
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
