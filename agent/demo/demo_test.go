package demo_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/conversation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is an Emitter that records what the agent emits.
type recorder struct {
	events []string
	text   []string
}

func (r *recorder) Text(d string) error {
	r.events = append(r.events, "text")
	r.text = append(r.text, d)
	return nil
}

func (r *recorder) ToolStart(c conversation.ToolCall) error {
	var in map[string]string
	if err := json.Unmarshal(c.Input, &in); err != nil {
		return err
	}
	r.events = append(r.events, "start:"+c.Name+":"+in["query"])
	return nil
}

func (r *recorder) ToolOutput(_, text string) error {
	r.events = append(r.events, "output")
	return nil
}

func (r *recorder) ToolEnd(_ string, res conversation.ToolResult) error {
	r.events = append(r.events, "end:"+res.Output)
	return nil
}

func TestRepliesWordByWord(t *testing.T) {
	a := demo.New(demo.Config{Words: 25})
	var r recorder
	require.NoError(t, a.Run(context.Background(), conversation.Request{Content: "what is chatd?"}, &r))
	require.Len(t, r.text, 25)
	require.Equal(t, strings.Join(demo.Reply("what is chatd?", 25), " "), strings.Join(r.text, ""))
	require.True(t, strings.HasPrefix(strings.Join(r.text, ""), `Demo reply to "what is chatd?".`))
	for _, e := range r.events {
		require.Equal(t, "text", e, "no tool without the word tool")
	}
	// Deterministic.
	var again recorder
	require.NoError(t, a.Run(context.Background(), conversation.Request{Content: "what is chatd?"}, &again))
	require.Equal(t, r.text, again.text)
}

func TestToolBetweenTwoSegments(t *testing.T) {
	a := demo.New(demo.Config{Words: 10})
	var r recorder
	require.NoError(t, a.Run(context.Background(), conversation.Request{Content: "Please use a Tool."}, &r))
	require.Equal(t, []string{
		"text", "text", "text", "text", "text",
		"start:demo_lookup:Please use a Tool.", "output", "output", "output", `end:3 demo results for "Please use a Tool."`,
		"text", "text", "text", "text", "text",
	}, r.events)
	require.False(t, strings.HasPrefix(r.text[5], "Demo"), "the second segment continues the reply")
}

func TestMentionsTool(t *testing.T) {
	for msg, want := range map[string]bool{
		"use a tool": true, "TOOL!": true, "(tool)": true,
		"tools": false, "toolbox": false, "stool": false, "": false,
	} {
		require.Equal(t, want, demo.MentionsTool(msg), msg)
	}
}

// The pace comes from the clock: with a fake clock each word waits for the clock to move.
func TestPaceAndCancel(t *testing.T) {
	clock := clockwork.NewFakeClock()
	a := demo.New(demo.Config{Words: 3, Delay: 30 * time.Millisecond, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var r recorder
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx, conversation.Request{Content: "hi"}, &r) }()

	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	clock.Advance(30 * time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(wctx, 1)) // waiting for the second word
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Len(t, r.text, 1)
}

func (r *recorder) AwaitApproval(conversation.ToolCall) (<-chan conversation.Decision, error) {
	return nil, errors.New("recorder: no approvals")
}
func (r *recorder) Paused() error                  { return nil }
func (r *recorder) Usage(conversation.Usage) error { return nil }
