package ws_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// catchupEnv runs one finished run of n words in a new session and returns the observer
// that watched it from the start.
func catchupEnv(t *testing.T, words int, conv func(*conversation.Config)) (*env, *wstest.Client) {
	t.Helper()
	e := newEnv(t, envOptions{agent: script.New(script.Words(words)), conv: conv})
	obs := e.session()
	require.Equal(t, "ack", obs.Chat("r1", "go").Type)
	obs.ReadTerminal()
	return e, obs
}

// rejoin connects a client that claims to be at (epoch, lastSeq) of the observer's session.
func rejoin(e *env, obs *wstest.Client, epoch string, lastSeq int64) (*wstest.Client, wstest.Frame) {
	c := e.dial()
	c.State.SessionID = obs.State.SessionID
	c.State.Epoch = epoch
	c.State.LastSeq = lastSeq
	return c, c.Hello(obs.State.SessionID)
}

func TestCatchUpReplaysAGapInsideTheRing(t *testing.T) {
	t.Parallel()
	e, obs := catchupEnv(t, 20, nil)

	// Pretend to have seen the first 5 events: the state those leave is a prefix of
	// what the observer saw.
	c := e.dial()
	c.State.SessionID, c.State.Epoch = obs.State.SessionID, obs.State.Epoch
	for _, f := range obs.Seen[:5] {
		require.NoError(t, c.State.Apply(f))
	}
	f := c.Hello(obs.State.SessionID)
	require.Equal(t, "resumed", f.Type)
	require.EqualValues(t, 5, f.LastSeq)
	require.Equal(t, obs.State.Epoch, f.Epoch)

	c.ReadToSeq(obs.State.LastSeq)
	// Exactly the missing events, byte for byte (they were encoded once).
	require.Len(t, c.Seen, len(obs.Seen)-5)
	for i, got := range c.Seen {
		require.Equal(t, string(obs.Seen[5+i].Raw), string(got.Raw))
	}
	e.requireConverged(obs.State.SessionID, c, obs)
}

func TestCatchUpAtHeadReplaysNothing(t *testing.T) {
	t.Parallel()
	e, obs := catchupEnv(t, 5, nil)
	head := obs.State.LastSeq
	c, f := rejoin(e, obs, obs.State.Epoch, head)
	require.Equal(t, "resumed", f.Type)
	require.Equal(t, head, f.LastSeq)
	// The next event it sees is the next run's first.
	ack := c.Chat("r2", "again")
	require.Equal(t, "ack", ack.Type)
	require.Equal(t, head+1, c.Seen[0].Seq)
	require.Equal(t, "chat.started", c.Seen[0].Type)
}

func TestCatchUpFallsBackToSnapshot(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		conv  func(*conversation.Config)
		epoch func(obs *wstest.Client) string
		seq   func(obs *wstest.Client) int64
	}{{
		name:  "gap older than the ring",
		conv:  func(c *conversation.Config) { c.RingEvents = 8 },
		epoch: func(obs *wstest.Client) string { return obs.State.Epoch },
		seq:   func(*wstest.Client) int64 { return 2 },
	}, {
		name:  "gap older than the ring's bytes",
		conv:  func(c *conversation.Config) { c.RingBytes = 600 },
		epoch: func(obs *wstest.Client) string { return obs.State.Epoch },
		seq:   func(*wstest.Client) int64 { return 2 },
	}, {
		name:  "unknown epoch",
		epoch: func(*wstest.Client) string { return "not-an-epoch" },
		seq:   func(obs *wstest.Client) int64 { return obs.State.LastSeq - 3 },
	}, {
		name:  "seq beyond the head",
		epoch: func(obs *wstest.Client) string { return obs.State.Epoch },
		seq:   func(obs *wstest.Client) int64 { return obs.State.LastSeq + 10 },
	}, {
		name:  "replay larger than the replay limit",
		conv:  func(c *conversation.Config) { c.MaxReplayBytes = 1500 },
		epoch: func(obs *wstest.Client) string { return obs.State.Epoch },
		seq:   func(*wstest.Client) int64 { return 1 },
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, obs := catchupEnv(t, 40, tc.conv)
			c, f := rejoin(e, obs, tc.epoch(obs), tc.seq(obs))
			require.Equal(t, "snapshot", f.Type)
			require.Equal(t, obs.State.Epoch, f.Epoch)
			require.Equal(t, obs.State.LastSeq, f.LastSeq)
			require.False(t, f.HasMore)
			require.Nil(t, f.ActiveRun)
			e.requireConverged(obs.State.SessionID, c, obs)
		})
	}
}

// After idle eviction the session's next actor is a new incarnation with a new epoch: a
// client holding the old epoch must get a snapshot, and it converges.
func TestCatchUpAfterEvictionIsASnapshot(t *testing.T) {
	t.Parallel()
	e, obs := catchupEnv(t, 10, nil)
	sid := uuid.MustParse(obs.State.SessionID)
	actor, ok := e.hub.Lookup(sid)
	require.True(t, ok)

	obs.WS.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The actor arms its idle timer once the observer's connection has unsubscribed.
	require.NoError(t, e.ConvClock.BlockUntilContext(ctx, 1))
	e.ConvClock.Advance(conversation.DefaultIdleTimeout)
	select {
	case <-actor.Done():
	case <-ctx.Done():
		t.Fatal("idle actor was not evicted")
	}

	c, f := rejoin(e, obs, obs.State.Epoch, obs.State.LastSeq)
	require.Equal(t, "snapshot", f.Type)
	require.NotEqual(t, obs.State.Epoch, f.Epoch)
	require.EqualValues(t, 0, f.LastSeq, "a new incarnation starts its seqs again")
	e.requireConverged(obs.State.SessionID, c)

	// And it follows the new incarnation's live stream.
	require.Equal(t, "ack", c.Chat("r2", "after eviction").Type)
	c.ReadTerminal()
	require.EqualValues(t, 1, c.Seen[0].Seq)
	e.requireConverged(obs.State.SessionID, c)
}

// A snapshot taken mid-segment carries the segment's text so far with status streaming,
// and the client that applies it and the rest of the stream ends where everyone else does.
func TestSnapshotIncludesTheOpenSegment(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(
		script.Text("partial ", "text"),
		script.ToolStart("c1", "slow", `{}`),
		script.ToolOutput("c1", "half "),
		gate.Wait(),
		script.ToolEnd("c1", ""),
		script.Text("second"),
		gate.Wait(),
		script.Text(" segment"),
	)})
	a := e.session()
	require.Equal(t, "ack", a.Chat("r1", "go").Type)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Mid-tool: the snapshot has the running tool with its output so far.
	a.Await(func(f wstest.Frame) bool { return f.Type == "tool.output" })
	b := e.join(a.State.SessionID)
	require.NotNil(t, b.State.ActiveRun)
	require.Equal(t, "running", b.State.ActiveRun.Status)
	msgs := b.State.Sorted()
	require.Len(t, msgs, 3)
	require.Equal(t, "partial text", msgs[1].Content)
	require.Equal(t, "complete", msgs[1].Status)
	require.Equal(t, "running", msgs[2].Tool.Status)
	require.Equal(t, "half ", *msgs[2].Tool.Output)

	// Mid-segment: the open segment is there, streaming, with its text so far.
	require.NoError(t, gate.Pass(ctx))
	a.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "second" })
	c := e.join(a.State.SessionID)
	msgs = c.State.Sorted()
	require.Len(t, msgs, 4)
	require.Equal(t, "second", msgs[3].Content)
	require.Equal(t, "streaming", msgs[3].Status)

	require.NoError(t, gate.Pass(ctx))
	a.ReadTerminal()
	b.ReadToSeq(a.State.LastSeq)
	c.ReadToSeq(a.State.LastSeq)
	e.requireConverged(a.State.SessionID, a, b, c)
}

// A hello with an epoch but no lastSeq, or a lastSeq but no epoch (the schema's
// dependentRequired), fails with bad_request: an epoch alone must not have the ring
// replayed from its start to a client that has none of the messages loaded before the
// ring's first event. Like any failed hello it leaves the connection open for another.
func TestHalfAHelloIsRefused(t *testing.T) {
	t.Parallel()
	e, obs := catchupEnv(t, 5, nil)
	for name, h := range map[string]map[string]any{
		"epoch alone":   {"epoch": obs.State.Epoch},
		"lastSeq alone": {"lastSeq": obs.State.LastSeq},
	} {
		c := e.dial()
		h["type"], h["sessionId"], h["requestId"] = "hello", obs.State.SessionID, "h1"
		c.SendUnchecked(h)
		f := c.Read()
		require.Equal(t, "error", f.Type, "%s: %s", name, f.Raw)
		require.Equal(t, "bad_request", f.Code, name)
		require.Equal(t, "h1", f.RequestID, name)
		require.Equal(t, "snapshot", c.Hello(obs.State.SessionID).Type, name)
		require.Empty(t, wstest.Diff(obs.State.Sorted(), c.State.Sorted()), name)
	}
	// Both, with an empty epoch (a client that has followed nothing yet), are a position
	// that matches no stream: a snapshot.
	c := e.dial()
	c.Send(map[string]any{"type": "hello", "sessionId": obs.State.SessionID, "epoch": "", "lastSeq": 0})
	f := c.Read()
	require.Equal(t, "snapshot", f.Type, "%s", f.Raw)
	require.Empty(t, wstest.Diff(obs.State.Sorted(), c.State.Sorted()))
}
