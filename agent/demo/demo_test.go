package demo_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/demo"
	"github.com/chatd/chatd/agent/sandbox/local"
	"github.com/chatd/chatd/agent/tools"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store/storetest"
	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// stream collects what the demo model answers to messages.
func stream(t *testing.T, m agent.Model, msgs ...agent.Message) (text string, calls []agent.ToolCall) {
	t.Helper()
	var b strings.Builder
	err := m.Stream(context.Background(), agent.ModelRequest{Messages: msgs}, func(ev agent.ModelEvent) error {
		switch ev.Kind {
		case agent.EventText:
			b.WriteString(ev.Text)
		case agent.EventToolCall:
			calls = append(calls, ev.ToolCall)
		}
		return nil
	})
	require.NoError(t, err)
	return b.String(), calls
}

func TestRepliesWordByWord(t *testing.T) {
	m := demo.NewModel(demo.Config{Words: 25})
	text, calls := stream(t, m, agent.Message{Role: agent.RoleUser, Text: "what is chatd?"})
	require.Empty(t, calls)
	require.Equal(t, strings.Join(demo.Reply("what is chatd?", 25), " "), text)
	require.True(t, strings.HasPrefix(text, `Demo reply to "what is chatd?".`))
	again, _ := stream(t, m, agent.Message{Role: agent.RoleUser, Text: "what is chatd?"})
	require.Equal(t, text, again, "deterministic")
}

func TestToolAndApprovalCalls(t *testing.T) {
	m := demo.NewModel(demo.Config{Words: 10})
	words := demo.Reply("use a tool", 10)
	half := len(words) / 2 // the call cuts the reply in two
	text, calls := stream(t, m, agent.Message{Role: agent.RoleUser, Text: "use a tool"})
	require.Equal(t, strings.Join(words[:half], " "), text)
	require.Len(t, calls, 1)
	require.Equal(t, demo.ToolName, calls[0].Name)

	// After the result: the rest of the reply, opened by what the tool said.
	text, calls = stream(t, m,
		agent.Message{Role: agent.RoleUser, Text: "use a tool"},
		agent.Message{Role: agent.RoleAssistant, Text: "…", ToolCalls: calls},
		agent.Message{Role: agent.RoleTool, ToolCallID: "demo-time", ToolName: "current_time", Result: "Friday, 2026-11-20T22:00:00Z"},
	)
	require.Empty(t, calls)
	require.Equal(t, " (current_time said: Friday, 2026-11-20T22:00:00Z) "+strings.Join(words[half:], " "), text)

	_, calls = stream(t, m, agent.Message{Role: agent.RoleUser, Text: "Please approve this"})
	require.Len(t, calls, 1)
	require.Equal(t, demo.ApprovalToolName, calls[0].Name)
}

func TestMentions(t *testing.T) {
	for msg, want := range map[string]bool{"use a tool": true, "TOOL!": true, "tools": false, "stool": false, "": false} {
		require.Equal(t, want, demo.MentionsTool(msg), msg)
	}
	for msg, want := range map[string]bool{"approve it": true, "Approve.": true, "approved": false} {
		require.Equal(t, want, demo.MentionsApprove(msg), msg)
	}
}

func TestPaceAndCancel(t *testing.T) {
	clock := clockwork.NewFakeClock()
	m := demo.NewModel(demo.Config{Words: 3, Delay: 30 * time.Millisecond, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- m.Stream(ctx, agent.ModelRequest{Messages: []agent.Message{{Role: agent.RoleUser, Text: "hi"}}}, func(ev agent.ModelEvent) error {
			got = append(got, ev.Text)
			return nil
		})
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	require.NoError(t, clock.BlockUntilContext(wctx, 1))
	clock.Advance(30 * time.Millisecond)
	require.NoError(t, clock.BlockUntilContext(wctx, 1)) // waiting before the second word
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Len(t, got, 1)
}

// What a newcomer sees in make run with "approve": the approval prompt, the pause after
// the approval timeout, and the resume, through the real loop, actor and a local sandbox.
func TestApproveFlow(t *testing.T) {
	st := storetest.New(t)
	clock := clockwork.NewFakeClock()
	p, err := local.New(t.TempDir())
	require.NoError(t, err)
	reg, err := agent.NewRegistry(tools.CurrentTime{}, demo.SandboxTool{})
	require.NoError(t, err)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)
	loop, err := agent.New(agent.Config{
		Model:     demo.NewModel(demo.Config{Words: 8}),
		Tools:     reg,
		Sandboxes: agent.NewSandboxes(p, st, clock),
		Clock:     clock,
		Logger:    log,
	})
	require.NoError(t, err)
	a := conversation.Start(conversation.Config{Store: st, Agent: loop, Clock: clockwork.NewFakeClock(), Logger: log}, uuid.New(), nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, a.Stop(ctx))
		require.NoError(t, a.Wait(ctx))
	})
	sub := wstest.NewSub()
	ctx := context.Background()
	_, err = a.Hello(ctx, conversation.HelloRequest{Create: true, Subscriber: sub})
	require.NoError(t, err)
	_, err = a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "please approve a sandbox command"})
	require.NoError(t, err)

	status := func(s string) wstest.Frame {
		return sub.Await(t, func(f wstest.Frame) bool { return f.Type == "run.status" && f.Run.Status == s })
	}
	waiting := status("awaiting_approval")
	require.Equal(t, demo.ApprovalToolName, waiting.Run.PendingApproval.Name)
	require.NoError(t, clock.BlockUntilContext(testCtx(t), 1))
	clock.Advance(agent.DefaultApprovalTimeout)
	status("paused")

	_, err = a.Decide(ctx, uuid.Nil, "demo-approval", true)
	require.NoError(t, err)
	status("running")
	end := sub.Await(t, wstest.Frame.Terminal)
	require.Equal(t, "chat.done", end.Type)

	msgs := sub.Messages()
	require.Len(t, msgs, 4)
	require.Equal(t, "ok", msgs[2].Tool.Status)
	require.Contains(t, *msgs[2].Tool.Output, "hello from your sandbox")
	require.Contains(t, *msgs[2].Tool.Output, "visits so far: 1")
	require.True(t, strings.HasPrefix(msgs[3].Content, " (demo_sandbox said: hello from your sandbox)"))
	stored, _, err := st.MessagesBefore(ctx, a.SessionID(), 0, 10)
	require.NoError(t, err)
	want, err := wstest.FromStore(stored)
	require.NoError(t, err)
	require.Empty(t, wstest.Diff(want, msgs))
	run, err := st.RunByRequest(ctx, a.SessionID(), "r1")
	require.NoError(t, err)
	require.Equal(t, chat.RunDone, run.Status)
	require.Positive(t, run.Usage.OutputTokens)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sandboxStub is demo_sandbox without a sandbox: the same spec, a fixed answer.
type sandboxStub struct{}

func (sandboxStub) Spec() agent.ToolSpec { return demo.SandboxTool{}.Spec() }
func (sandboxStub) Run(context.Context, json.RawMessage, agent.Env) (string, error) {
	return "hello from your sandbox\n", nil
}

// demoRun is what one run of the demo emitted, read from a recorder's log.
type demoRun struct {
	before, after []string // text deltas before the tool call and after its result
	call          []string // the call's id, name and input ("" when none)
	output        string   // the call's result
	log           []string
}

func readRun(log []string) demoRun {
	r := demoRun{log: log}
	for _, l := range log {
		kind, rest, _ := strings.Cut(l, ": ")
		switch kind {
		case "text":
			if r.call == nil {
				r.before = append(r.before, rest)
			} else {
				r.after = append(r.after, rest)
			}
		case "tool.start", "tool.approval":
			r.call = strings.SplitN(rest, " ", 3)
		case "tool.end":
			f := strings.SplitN(rest, " ", 3)
			r.output = f[2]
		}
	}
	return r
}

// made reports whether the run made a call (or asked approval for one) of the tool.
func (r demoRun) made(name string) bool {
	for _, l := range r.log {
		for _, kind := range []string{"tool.start: ", "tool.approval: "} {
			if rest, ok := strings.CutPrefix(l, kind); ok && strings.SplitN(rest, " ", 3)[1] == name {
				return true
			}
		}
	}
	return false
}

// cuts returns every way text pieces can be cut off: after each piece, and inside each
// at every character boundary, from nothing to all of it.
func cuts(pieces []string) []string {
	var out []string
	done := ""
	for _, p := range pieces {
		for i := range p { // the index of each character
			out = append(out, done+p[:i])
		}
		done += p
	}
	return append(out, done)
}

// A demo run continued from any point of its checkpoint (its text cut after any word or
// inside one, before or after its tool call) ends with exactly the text an
// uninterrupted run has, and makes its tool call once in all: not again when the
// checkpoint holds it.
func TestContinuedRunEndsAsAnUninterruptedOne(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(time.Date(2026, 11, 20, 22, 30, 0, 0, time.UTC))
	reg, err := agent.NewRegistry(tools.CurrentTime{Clock: clock}, sandboxStub{})
	require.NoError(t, err)
	loop, err := agent.New(agent.Config{Model: demo.NewModel(demo.Config{Words: 12}), Tools: reg, Clock: clock, ModelIdleTimeout: -1})
	require.NoError(t, err)
	run := func(req conversation.Request) demoRun {
		rec := &agenttest.Recorder{}
		require.NoError(t, loop.Run(t.Context(), req, rec))
		return readRun(rec.Log())
	}

	for _, content := range []string{"what is chatd?", "is it naïve to use a tool?", "please approve this"} {
		whole := run(conversation.Request{Content: content})
		text := strings.Join(whole.before, "") + strings.Join(whole.after, "")
		require.Equal(t, whole.call != nil, demo.MentionsTool(content) || demo.MentionsApprove(content), content)

		// Cut off before the call was made (or in a reply without one).
		for _, said := range cuts(whole.before) {
			cont := run(conversation.Request{Content: content, Checkpoint: []chat.Message{
				{Role: chat.RoleAssistant, Kind: chat.KindText, Content: said, Status: chat.MessageStreaming},
			}})
			require.Equal(t, text, said+strings.Join(cont.before, "")+strings.Join(cont.after, ""), "%q cut at %q", content, said)
			require.Equal(t, whole.call, cont.call, "%q cut at %q: the call is made", content, said)
		}
		if whole.call == nil {
			continue
		}
		// Cut off after the call's result.
		first := strings.Join(whole.before, "")
		output := whole.output
		for _, said := range cuts(whole.after) {
			checkpoint := []chat.Message{
				{Role: chat.RoleAssistant, Kind: chat.KindText, Content: first, Status: chat.MessageComplete},
				{Role: chat.RoleTool, Kind: chat.KindText, Status: chat.MessageComplete, Tool: &chat.ToolCall{
					CallID: whole.call[0], Name: whole.call[1], Input: json.RawMessage(whole.call[2]), Output: &output, Status: chat.ToolOK}},
				{Role: chat.RoleAssistant, Kind: chat.KindText, Content: said, Status: chat.MessageStreaming},
			}
			cont := run(conversation.Request{Content: content, Checkpoint: checkpoint})
			require.Equal(t, text, first+said+strings.Join(cont.before, ""), "%q cut at %q after the call", content, said)
			require.False(t, cont.made(whole.call[1]), "%q cut at %q after the call: it is not made again: %q", content, said, cont.log)
		}
	}
}

func TestReplyEndsWithASentence(t *testing.T) {
	for _, n := range []int{7, 20, 60, 61, 200} {
		words := demo.Reply("hello there", n)
		require.GreaterOrEqual(t, len(words), n)
		require.True(t, strings.HasSuffix(words[len(words)-1], "."), "%d words end a sentence: %q", n, words[len(words)-1])
		require.Less(t, len(words), n+60, "only the sentence is finished")
	}
	require.Len(t, demo.Reply("hello there", 2), 2, "shorter than the opening: cut")
}

// A message with "steps" reports the run's progress as the reply goes, from 0 to
// ProgressSteps, each step once and in order; a continued reply reports from where it is.
func TestStepsReportProgress(t *testing.T) {
	m := demo.NewModel(demo.Config{Words: 30})
	progress := func(msgs ...agent.Message) (steps []int, text string) {
		var b strings.Builder
		err := m.Stream(context.Background(), agent.ModelRequest{Messages: msgs}, func(ev agent.ModelEvent) error {
			switch ev.Kind {
			case agent.EventText:
				b.WriteString(ev.Text)
			case agent.EventProgress:
				require.Equal(t, demo.ProgressSteps, ev.Progress.Of)
				require.Equal(t, demo.ProgressLabel, ev.Progress.Label)
				steps = append(steps, ev.Progress.Step)
			}
			return nil
		})
		require.NoError(t, err)
		return steps, b.String()
	}
	user := agent.Message{Role: agent.RoleUser, Text: "take your steps"}
	steps, text := progress(user)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, steps)

	half := text[:len(text)/2]
	cont, rest := progress(user, agent.Message{Role: agent.RoleAssistant, Text: half})
	require.Equal(t, text, half+rest, "the continuation ends as the whole reply")
	require.Equal(t, 7, cont[len(cont)-1])
	require.GreaterOrEqual(t, cont[0], 2, "it starts from where the reply is, not from 0")

	none, _ := progress(agent.Message{Role: agent.RoleUser, Text: "one step"})
	require.Empty(t, none, "only the word steps asks for it")
}
