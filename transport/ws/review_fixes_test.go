package ws_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
)

// A replay is measured in the bytes the connection would send, not by an estimate:
// text that JSON escapes (<, >, &: HTML, code, shell output) is up to six times larger on
// the wire, and a replay over MaxReplayBytes must be answered with a snapshot, as
// docs/protocol.md says.
func TestReplayOverTheLimitInWireBytesIsASnapshot(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	e := newEnv(t, envOptions{
		agent: script.New(script.Text(strings.Repeat("<", 4000))), // 4000 bytes, 24000 on the wire
		conv:  func(c *conversation.Config) { c.MaxReplayBytes = limit },
	})
	a := e.session()
	a.Chat("r1", "go")
	a.ReadTerminal()

	b := e.dial()
	b.State.SessionID, b.State.Epoch, b.State.LastSeq = a.State.SessionID, a.State.Epoch, 0
	require.Equal(t, "snapshot", b.Hello(a.State.SessionID).Type)

	// A gap that fits is still replayed.
	c := e.dial()
	c.State.SessionID, c.State.Epoch, c.State.LastSeq = a.State.SessionID, a.State.Epoch, a.State.LastSeq-1
	require.Equal(t, "resumed", c.Hello(a.State.SessionID).Type)
}

// A client that sends chat.send right behind its hello, as the protocol allows, while the
// database has a blip: the hello fails with its code, the send is answered with the same
// code, and the connection stays open for another hello (a 4000 would tell the client to
// stop and fix itself).
func TestCommandBehindAFailedHelloIsAnsweredNotClosed(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	fail.Store(1)
	e := newEnv(t, envOptions{
		agent: script.New(script.Text("ok")),
		conv: func(c *conversation.Config) {
			c.Store = slowStore{Store: c.Store, wait: func(context.Context) error {
				if fail.Add(-1) >= 0 {
					return errors.New("database blip")
				}
				return nil
			}}
		},
	})
	c := e.dial()
	c.Send(map[string]any{"type": "hello", "requestId": "h"})
	c.Send(map[string]any{"type": "chat.send", "requestId": "r1", "content": "hi"})
	hello := c.ReadReply("h")
	require.Equal(t, "storage", hello.Code)
	send := c.ReadReply("r1")
	require.Equal(t, "error", send.Type)
	require.Equal(t, "storage", send.Code)

	// The connection is still there: hello again, and chat.
	require.Equal(t, "snapshot", c.Hello("").Type)
	require.Equal(t, "ack", c.Chat("r2", "hi").Type)
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
}
