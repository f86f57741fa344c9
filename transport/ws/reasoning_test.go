package ws_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/transport/wstest"
)

// Reasoning is its own segment (kind reasoning), stored by the segment rule; its
// signature is kept for the model and never sent to clients.
func TestReasoningSegments(t *testing.T) {
	t.Parallel()
	gate := script.NewGate()
	e := newEnv(t, envOptions{agent: script.New(
		script.Reasoning(`{"signature":"sig-1"}`, "Let me ", "think."),
		script.Text("The answer", " is 42."),
		script.Reasoning(`{"signature":"sig-2"}`, "Now check"),
		gate.Wait(),
		script.Tool("c1", "check", `{}`, "ok"),
		script.Text("Checked."),
	)})
	c := e.session()
	require.Equal(t, "ack", c.Chat("r1", "why?").Type)
	// Mid-reasoning, a new tab's snapshot has the open reasoning segment with its text.
	c.Await(func(f wstest.Frame) bool { return f.Type == "chat.delta" && *f.Text == "Now check" })
	late := e.join(c.State.SessionID)
	open := late.State.Sorted()
	require.Equal(t, "reasoning", open[3].Kind)
	require.Equal(t, "complete", open[3].Status, "EndReasoning closed the block")
	require.NoError(t, gate.Pass(testCtx(t)))
	require.Equal(t, "chat.done", c.ReadTerminal().Type)
	late.ReadToSeq(c.State.LastSeq)

	msgs := e.dbMessages(c.State.SessionID)
	require.Len(t, msgs, 6)
	kinds := []string{}
	for _, m := range msgs {
		kinds = append(kinds, m.Role+"/"+m.Kind)
	}
	require.Equal(t, []string{"user/", "assistant/reasoning", "assistant/", "assistant/reasoning", "tool/", "assistant/"}, kinds)
	require.Equal(t, "Let me think.", msgs[1].Content)
	require.Equal(t, "The answer is 42.", msgs[2].Content)
	e.requireConverged(c.State.SessionID, c, late)

	// The signatures are stored for the model's next call, not sent on the wire.
	stored, _, err := e.store.MessagesBefore(context.Background(), uuid.MustParse(c.State.SessionID), 0, 10)
	require.NoError(t, err)
	require.JSONEq(t, `{"signature":"sig-1"}`, string(stored[1].ProviderData))
	require.JSONEq(t, `{"signature":"sig-2"}`, string(stored[3].ProviderData))
	for _, f := range c.Seen {
		require.NotContains(t, string(f.Raw), "sig-1")
	}
}
