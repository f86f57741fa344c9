package ws_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/transport/wstest"
)

// With delta coalescing on, clients that watch from the start, join with a snapshot in
// the middle of a window, or resume with a replay in the middle of another, all end with
// the stored transcript: nothing held back is lost, repeated or out of order.
func TestCoalescedDeltasOverWebSocket(t *testing.T) {
	t.Parallel()
	const window = 25 * time.Millisecond
	gate := script.NewGate()
	// Each stage is followed by two waits: the test's first Pass returns once the
	// stage's text has reached the actor's inbox, the second starts the next stage.
	e := newEnv(t, envOptions{
		agent: script.New(
			script.Text("hello ", "wor"), gate.Wait(), gate.Wait(),
			script.Text("ld", ", again"), gate.Wait(), gate.Wait(),
			script.Text(" and", " again"), gate.Wait(), gate.Wait(),
			script.Text("."),
		),
		conv: func(c *conversation.Config) { c.CoalesceDeltas = window },
	})
	ctx := testCtx(t)
	obs := e.session()
	require.Equal(t, "ack", obs.Chat("r1", "go").Type)
	started := obs.Await(func(f wstest.Frame) bool { return f.Type == "assistant.segment.started" })
	actor, ok := e.hub.Lookup(uuid.MustParse(obs.State.SessionID))
	require.True(t, ok)
	// handled returns once the actor has taken everything the agent posted.
	handled := func() {
		t.Helper()
		_, err := actor.History(ctx, 0, 1)
		require.NoError(t, err)
	}

	// Mid-window, a new tab's snapshot has the held text, at the seq of the delta that
	// published it to everyone else.
	require.NoError(t, gate.Pass(ctx))
	handled()
	joined := e.dial()
	snap := joined.Hello(obs.State.SessionID)
	require.Equal(t, "snapshot", snap.Type)
	require.Equal(t, "hello wor", joined.State.Messages[started.Message.ID].Content)
	first := obs.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" })
	require.Equal(t, "hello wor", *first.Text)
	require.Equal(t, first.Seq, snap.LastSeq)

	// Mid-window, a client that lost the connection right after segment.started resumes
	// with a replay that ends with the held text.
	require.NoError(t, gate.Pass(ctx))
	require.NoError(t, gate.Pass(ctx))
	handled()
	resumed := e.dial()
	resumed.State.SessionID, resumed.State.Epoch = obs.State.SessionID, obs.State.Epoch
	for _, f := range obs.Seen {
		require.NoError(t, resumed.State.Apply(f))
		if f.Seq == started.Seq {
			break
		}
	}
	require.Equal(t, "resumed", resumed.Hello(obs.State.SessionID).Type)
	resumed.ReadToSeq(started.Seq + 2)
	require.Equal(t, "hello world, again", resumed.State.Messages[started.Message.ID].Content)

	// With nobody joining, the window's timer publishes the held text.
	require.NoError(t, gate.Pass(ctx))
	require.NoError(t, gate.Pass(ctx))
	handled()
	e.ConvClock.Advance(window)
	third := obs.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && f.Seq > first.Seq+1 })
	require.Equal(t, " and again", *third.Text)

	require.NoError(t, gate.Pass(ctx))
	require.Equal(t, "chat.done", obs.ReadTerminal().Type)
	joined.ReadToSeq(obs.State.LastSeq)
	resumed.ReadToSeq(obs.State.LastSeq)

	var got []string
	for _, f := range obs.Seen {
		if f.Type == "chat.delta" {
			got = append(got, *f.Text)
		}
	}
	require.Equal(t, []string{"hello wor", "ld, again", " and again", "."}, got)
	require.Equal(t, "hello world, again and again.", obs.State.Messages[started.Message.ID].Content)
	e.requireConverged(obs.State.SessionID, obs, joined, resumed)
}
