package ws_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/ws"
	"github.com/chatd/chatd/transport/wstest"
)

// Pings of the slow-database tests, on the real clock: a database call takes several
// ping timeouts, so a connection whose pongs went unread while it waited would be cut.
const (
	slowPingInterval = 100 * time.Millisecond
	slowPingTimeout  = 300 * time.Millisecond
)

func slowPings(c *ws.Config) {
	c.PingInterval = slowPingInterval
	c.PingTimeout = slowPingTimeout
}

// requireServedDespiteSlowDatabase says hello and chats on a server whose every database
// call takes longer than a ping timeout: the client, which answers pings, must stay
// connected and get its snapshot, its ack and the run's events in order.
func requireServedDespiteSlowDatabase(t *testing.T, e *env) {
	t.Helper()
	c := e.dial()
	c.Send(map[string]any{"type": "hello", "requestId": "h"})
	snap, err := c.TryRead()
	require.NoError(t, err, "the connection must survive a slow hello")
	require.Equal(t, "snapshot", snap.Type, "%s", snap.Raw)
	require.Equal(t, "h", snap.RequestID)

	ack, err := readReply(c, "r1")
	require.NoError(t, err, "the connection must survive a slow chat.send")
	require.Equal(t, "ack", ack.Type, "%s", ack.Raw)
	end := c.ReadTerminal()
	require.Equal(t, "chat.done", end.Type, "%s", end.Raw)

	require.Equal(t, "chat.started", c.Seen[0].Type)
	for i, f := range c.Seen {
		require.EqualValues(t, snap.LastSeq+int64(i)+1, f.Seq, "%s", f.Raw)
	}
	require.Equal(t, "slow but steady", c.State.Sorted()[1].Content)
	e.requireConverged(c.State.SessionID, c)
}

// readReply sends chat.send and reads until its reply, returning a read error instead of
// failing (the connection being cut is what the slow-database tests look for).
func readReply(c *wstest.Client, requestID string) (wstest.Frame, error) {
	c.Send(map[string]any{"type": "chat.send", "requestId": requestID, "content": "hi"})
	for {
		f, err := c.TryRead()
		if err != nil {
			return f, err
		}
		if (f.Type == "ack" || f.Type == "error") && f.RequestID == requestID {
			return f, nil
		}
	}
}

func TestSlowDatabaseDoesNotCostAHealthyClientItsConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text("slow", " but", " steady")),
		conv:     func(c *conversation.Config) { c.Store = slowStore{Store: c.Store, wait: delayed(time.Second)} },
		realWS:   true,
		wsConfig: slowPings,
	})
	requireServedDespiteSlowDatabase(t, e)
}

// The same with a real slow database: every round trip to PostgreSQL goes through a
// proxy that delays it.
func TestSlowDatabaseBehindAProxyDoesNotCostAHealthyClientItsConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		agent:    script.New(script.Text("slow", " but", " steady")),
		pool:     []func(*pgxpool.Config){storetest.Delayed(t, 400*time.Millisecond)},
		realWS:   true,
		wsConfig: slowPings,
	})
	requireServedDespiteSlowDatabase(t, e)
}
