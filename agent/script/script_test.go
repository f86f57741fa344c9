package script_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type recorder struct{ got []string }

func (r *recorder) Text(d string) error { r.got = append(r.got, "text:"+d); return nil }
func (r *recorder) ToolStart(c conversation.ToolCall) error {
	r.got = append(r.got, "start:"+c.ID+":"+string(c.Input))
	return nil
}
func (r *recorder) ToolOutput(id, s string) error { r.got = append(r.got, "out:"+id+":"+s); return nil }
func (r *recorder) ToolEnd(id string, res conversation.ToolResult) error {
	if res.Err != nil {
		r.got = append(r.got, "fail:"+id+":"+res.Err.Error())
		return nil
	}
	r.got = append(r.got, "end:"+id+":"+res.Output)
	return nil
}

func TestPlaysStepsInOrder(t *testing.T) {
	a := script.New(script.Words(3), script.Tool("c", "n", `{}`, "o"), script.ToolStart("d", "n", `{"x":1}`), script.ToolOutput("d", "p"), script.ToolFail("d", "bad"))
	var r recorder
	require.NoError(t, a.Run(context.Background(), conversation.Request{}, &r))
	require.Equal(t, []string{"text:w1", "text: w2", "text: w3", "start:c:{}", "end:c:o", `start:d:{"x":1}`, "out:d:p", "fail:d:bad"}, r.got)
	require.Equal(t, "w1 w2 w3", script.Joined(3))
}

func TestFailuresAndCodes(t *testing.T) {
	var r recorder
	err := script.New(script.Text("a"), script.Fail("model_error", "no"), script.Text("never")).Run(context.Background(), conversation.Request{}, &r)
	var ce *conversation.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "model_error", ce.Code)
	require.Equal(t, []string{"text:a"}, r.got)
}

// Pass lets exactly one waiting step through, and only returns once it has.
func TestGate(t *testing.T) {
	g := script.NewGate()
	var r recorder
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- script.New(g.Wait(), script.Text("1"), g.Wait(), script.Text("2")).Run(ctx, conversation.Request{}, &r)
	}()

	pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer pcancel()
	require.NoError(t, g.Pass(pctx))
	// The agent now runs to the second gate; cancelling ends it there.
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.LessOrEqual(t, len(r.got), 1)

	short, scancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer scancel()
	require.True(t, errors.Is(g.Pass(short), context.DeadlineExceeded), "no agent waits at the gate any more")
}

func (r *recorder) AwaitApproval(conversation.ToolCall) (<-chan conversation.Decision, error) {
	return nil, errors.New("recorder: no approvals")
}
func (r *recorder) AwaitDecision(string) (<-chan conversation.Decision, error) {
	return nil, errors.New("recorder: no approvals")
}
func (r *recorder) Expire(string) error    { return nil }
func (r *recorder) Paused() error          { return nil }
func (r *recorder) Resumed() error         { return nil }
func (r *recorder) Notice(string) error    { return nil }
func (r *recorder) Reasoning(string) error { return nil }
func (r *recorder) EndReasoning(json.RawMessage) error {
	return nil
}
func (r *recorder) Usage(conversation.Usage) error  { return nil }
func (r *recorder) Progress(int, int, string) error { return nil }
func (r *recorder) State(json.RawMessage) error     { return nil }
