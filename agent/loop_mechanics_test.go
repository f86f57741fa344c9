package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/agent/modeltest"
	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/transport/wstest"
)

// waitLimit bounds every wait of these tests on something the loop should do; a test
// that waits longer has found a hang.
const waitLimit = 10 * time.Second

// recv receives from ch, failing the test when nothing arrives in time.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// give sends v on ch, failing the test when nobody takes it in time.
func give[T any](t *testing.T, ch chan<- T, v T, what string) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(waitLimit):
		t.Fatalf("timed out handing over %s", what)
	}
}

// endedRun checks that the run a terminal frame reports is stored as reported, and
// returns the stored run.
func (h *harness) endedRun(end wstest.Frame) chat.Run {
	h.t.Helper()
	require.NotNil(h.t, end.Run, "terminal frame without a run")
	id, err := uuid.Parse(end.Run.RunID)
	require.NoError(h.t, err)
	r, err := h.st.RunGet(context.Background(), id)
	require.NoError(h.t, err)
	require.Equal(h.t, end.Run.Status, string(r.Status), "stored run status")
	require.Equal(h.t, end.Run.CancelReason, string(r.CancelReason), "stored cancel reason")
	if end.Run.Error == nil {
		require.Nil(h.t, r.Error, "stored run error")
	} else {
		require.NotNil(h.t, r.Error, "stored run error")
		require.Equal(h.t, end.Run.Error.Code, r.Error.Code)
		require.Equal(h.t, end.Run.Error.Message, r.Error.Message)
	}
	require.NotNil(h.t, r.EndedAt, "the stored run has no end time")
	return r
}

// modelCalls returns a Turn.Before that reports each model call, with the loop clock's
// time, and holds the call until the test takes the report. *hp is read only once the
// run has started, after the test has set it.
func modelCalls(hp **harness, calls chan<- time.Time) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case calls <- (*hp).clock.Now():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// noIdleTimeout keeps the model idle timer off the fake clock, for tests that count the
// clock's timers to know the retry backoff has started.
func noIdleTimeout(c *agent.Config) { c.ModelIdleTimeout = -1 }

func errorInfo(code, message string) *wstest.ErrorInfo {
	return &wstest.ErrorInfo{Code: code, Message: message}
}

// --- Retries -------------------------------------------------------------------------

// A transient error before any output is retried after the backoff, and the retry's
// answer is the run's answer.
func TestTransientModelErrorIsRetried(t *testing.T) {
	t.Parallel()
	calls := make(chan time.Time)
	var h *harness
	model := modeltest.New(
		modeltest.Turn{Before: modelCalls(&h, calls), Err: modeltest.Transient("overloaded")},
		modeltest.Turn{Before: modelCalls(&h, calls), Events: modeltest.Text("Hello", " again.")},
	)
	h = newHarness(t, model, noIdleTimeout)
	h.send("hi")

	first := recv(t, calls, "the first model call")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultRetryBackoff)
	second := recv(t, calls, "the retry")
	require.Equal(t, agent.DefaultRetryBackoff, second.Sub(first), "the retry came before its backoff")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	require.Nil(t, end.Run.Error)
	h.endedRun(end)

	reqs := model.Requests()
	require.Equal(t, 2, len(reqs))
	require.Equal(t, reqs[0], reqs[1], "the retry should send the same request")

	msgs := h.stored()
	require.Len(t, msgs, 2)
	require.Equal(t, "user", msgs[0].Role)
	require.Equal(t, "assistant", msgs[1].Role)
	require.Equal(t, "Hello again.", msgs[1].Content)
	require.Equal(t, "complete", msgs[1].Status)
	require.Nil(t, msgs[1].Error)
}

// Three transient failures in a row (the call and its two retries) end the run, after
// backing off 1s and then 2s.
func TestTransientModelErrorsGiveUpAfterThreeAttempts(t *testing.T) {
	t.Parallel()
	calls := make(chan time.Time)
	var h *harness
	failing := modeltest.Turn{Before: modelCalls(&h, calls), Err: modeltest.Transient("overloaded")}
	model := modeltest.New(failing, failing, failing, modeltest.Say("a fourth attempt must not happen"))
	h = newHarness(t, model, noIdleTimeout)
	h.send("hi")

	t0 := recv(t, calls, "the first model call")
	h.waitTimers(1)
	h.clock.Advance(time.Second - time.Millisecond)
	// Had the backoff timer fired, the loop would now be held in the next call's Before
	// with no timer left, and this would time out.
	h.waitTimers(1)
	require.Equal(t, 1, len(model.Requests()), "retried before the 1s backoff")
	h.clock.Advance(time.Millisecond)
	t1 := recv(t, calls, "the first retry")
	require.Equal(t, time.Second, t1.Sub(t0))

	h.waitTimers(1)
	h.clock.Advance(2*time.Second - time.Millisecond)
	h.waitTimers(1)
	require.Equal(t, 2, len(model.Requests()), "retried before the 2s backoff")
	h.clock.Advance(time.Millisecond)
	t2 := recv(t, calls, "the second retry")
	require.Equal(t, 2*time.Second, t2.Sub(t1))

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.NotNil(t, end.Run.Error)
	require.Equal(t, "overloaded", end.Run.Error.Code)
	require.Contains(t, end.Run.Error.Message, "gave up after 3 attempts")
	require.Equal(t, "the model is temporarily unavailable (gave up after 3 attempts)", end.Run.Error.Message)
	run := h.endedRun(end)
	require.Equal(t, chat.RunError, run.Status)
	require.Equal(t, 3, len(model.Requests()))

	msgs := h.stored()
	require.Len(t, msgs, 1, "nothing but the user's message should be stored")
}

// A retry-after hint longer than the backoff is honoured.
func TestTransientModelErrorHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	calls := make(chan time.Time)
	var h *harness
	model := modeltest.New(
		modeltest.Turn{Before: modelCalls(&h, calls), Err: modeltest.TransientAfter("rate_limited", 5*time.Second)},
		modeltest.Turn{Before: modelCalls(&h, calls), Events: modeltest.Text("ok")},
	)
	h = newHarness(t, model, noIdleTimeout)
	h.send("hi")

	t0 := recv(t, calls, "the first model call")
	h.waitTimers(1)
	h.clock.Advance(time.Second)
	h.waitTimers(1) // still waiting: the backoff alone would have fired by now
	require.Equal(t, 1, len(model.Requests()), "retried after the backoff instead of the retry-after")
	h.clock.Advance(4 * time.Second)
	t1 := recv(t, calls, "the retry")
	require.Equal(t, 5*time.Second, t1.Sub(t0))

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)
	require.Equal(t, 2, len(model.Requests()))
	msgs := h.stored()
	require.Len(t, msgs, 2)
	require.Equal(t, "ok", msgs[1].Content)
}

// A retry-after hint shorter than the backoff does not shorten it.
func TestShortRetryAfterKeepsTheBackoff(t *testing.T) {
	t.Parallel()
	calls := make(chan time.Time)
	var h *harness
	model := modeltest.New(
		modeltest.Turn{Before: modelCalls(&h, calls), Err: modeltest.TransientAfter("rate_limited", 100*time.Millisecond)},
		modeltest.Turn{Before: modelCalls(&h, calls), Events: modeltest.Text("ok")},
	)
	h = newHarness(t, model, noIdleTimeout)
	h.send("hi")

	t0 := recv(t, calls, "the first model call")
	h.waitTimers(1)
	h.clock.Advance(100 * time.Millisecond)
	h.waitTimers(1)
	require.Equal(t, 1, len(model.Requests()), "retried after the retry-after instead of the longer backoff")
	h.clock.Advance(900 * time.Millisecond)
	t1 := recv(t, calls, "the retry")
	require.Equal(t, time.Second, t1.Sub(t0))
	require.Equal(t, "chat.done", h.end().Type)
}

// Once a call has streamed output, a transient error is not retried: the run ends with
// the partial answer kept, and the error on the run and on that segment.
func TestTransientModelErrorAfterOutputIsNotRetried(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: modeltest.Text("Partial ", "answer"), Err: modeltest.Transient("overloaded")},
		modeltest.Say("a retry must not happen"),
	)
	h := newHarness(t, model)
	h.send("hi")

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	want := errorInfo("overloaded", "the model is temporarily unavailable")
	require.Equal(t, want, end.Run.Error)
	h.endedRun(end)
	require.Equal(t, 1, len(model.Requests()))

	msgs := h.stored()
	require.Len(t, msgs, 2)
	last := msgs[len(msgs)-1]
	require.Equal(t, "assistant", last.Role)
	require.Equal(t, "Partial answer", last.Content)
	require.Equal(t, "error", last.Status)
	require.Equal(t, want, last.Error)
}

// A model call that goes quiet is hung up on after ModelIdleTimeout since its last
// event (each event restarts the wait), and the run ends with the output it had.
func TestSilentModelIsHungUpOn(t *testing.T) {
	t.Parallel()
	started, release := make(chan time.Time), make(chan struct{})
	var h *harness
	model := modeltest.New(modeltest.Turn{
		Before: func(ctx context.Context) error {
			if err := modelCalls(&h, started)(ctx); err != nil {
				return err
			}
			<-release
			return nil
		},
		Events: modeltest.Text("partial"),
		Hang:   true,
	})
	h = newHarness(t, model, func(c *agent.Config) { c.MaxRetries = -1 })
	h.send("hi")

	recv(t, started, "the model call")
	h.waitTimers(1)
	h.clock.Advance(4 * time.Minute)
	close(release)
	h.await("chat.delta")
	h.waitTimers(1) // the event restarted the wait
	h.clock.Advance(agent.DefaultModelIdleTimeout - time.Second)
	// Had the event not restarted it, the timer would have fired (and gone) by now.
	h.waitTimers(1)
	h.clock.Advance(time.Second)

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	want := errorInfo(agent.CodeModelUnreachable, "the model provider sent nothing for 5m0s")
	require.Equal(t, want, end.Run.Error)
	h.endedRun(end)
	msgs := h.stored()
	require.Len(t, msgs, 2)
	require.Equal(t, "partial", msgs[1].Content)
	require.Equal(t, "error", msgs[1].Status)
}

// streamFunc is a model made of a function.
type streamFunc func(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error

func (f streamFunc) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	return f(ctx, req, emit)
}

var keepAlive = agent.ModelEvent{Kind: agent.EventKeepAlive}

// Keep-alives restart the idle wait like any event, but are not output: a call that sent
// only keep-alives before it went quiet has streamed nothing, so it is retried, and
// nothing of it is stored.
func TestKeepAlivesHoldOffTheIdleTimeout(t *testing.T) {
	t.Parallel()
	step, taken := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	model := streamFunc(func(ctx context.Context, _ agent.ModelRequest, emit func(agent.ModelEvent) error) error {
		if calls.Add(1) > 1 {
			return emit(agent.ModelEvent{Kind: agent.EventText, Text: "Hello."})
		}
		for range 2 {
			select {
			case <-step:
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := emit(keepAlive); err != nil {
				return err
			}
			select {
			case taken <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		<-ctx.Done() // then silence
		return ctx.Err()
	})
	h := newHarness(t, model)
	h.send("hi")

	for range 2 {
		h.waitTimers(1)
		h.clock.Advance(agent.DefaultModelIdleTimeout - time.Second)
		give(t, step, struct{}{}, "a keep-alive's turn")
		recv(t, taken, "the keep-alive")
	}
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultModelIdleTimeout - time.Second)
	// Had the keep-alive not restarted it, the timer would have fired (and gone) by now.
	h.waitTimers(1)
	h.clock.Advance(time.Second) // hung up on
	h.waitTimers(1)              // the retry's backoff: keep-alives are not "streamed"
	h.clock.Advance(agent.DefaultRetryBackoff)

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	require.EqualValues(t, 2, calls.Load())
	msgs := h.stored()
	require.Len(t, msgs, 2, "keep-alives are not output")
	require.Equal(t, "Hello.", msgs[1].Content)
}

// Without an idle timeout keep-alives are ignored: a transient error after them is
// retried, as one before any output is.
func TestKeepAlivesAreNotOutput(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{keepAlive, keepAlive}, Err: modeltest.Transient("overloaded")},
		modeltest.Turn{Events: append([]agent.ModelEvent{keepAlive}, modeltest.Text("Hello", " again.")...)},
	)
	h := newHarness(t, model, noIdleTimeout)
	h.send("hi")
	h.waitTimers(1)
	h.clock.Advance(agent.DefaultRetryBackoff)

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	require.Len(t, model.Requests(), 2)
	msgs := h.stored()
	require.Len(t, msgs, 2)
	require.Equal(t, "Hello again.", msgs[1].Content)
}

// A permanent error is not retried.
func TestPermanentModelErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	model := modeltest.New(
		modeltest.Turn{Err: modeltest.Permanent("invalid_request", "the model rejected the request")},
		modeltest.Say("a retry must not happen"),
	)
	h := newHarness(t, model)
	h.send("hi")

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.Equal(t, errorInfo("invalid_request", "the model rejected the request"), end.Run.Error)
	h.endedRun(end)
	require.Equal(t, 1, len(model.Requests()))
	require.Len(t, h.stored(), 1)
}

// A model error that is not a *ModelError ends the run with a generic code and none of
// the raw error's text.
func TestPlainModelErrorHidesItsText(t *testing.T) {
	t.Parallel()
	raw := errors.New("POST https://llm.internal.example/v1/chat: 500: upstream said api_key=sk-SECRET123 is bad")
	model := modeltest.New(modeltest.Turn{Err: raw}, modeltest.Say("a retry must not happen"))
	h := newHarness(t, model)
	h.send("hi")

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.NotNil(t, end.Run.Error)
	require.Equal(t, agent.CodeModelError, end.Run.Error.Code)
	require.NotEmpty(t, end.Run.Error.Message)
	for _, leak := range []string{"sk-SECRET123", "api_key", "llm.internal.example", "upstream", "POST"} {
		require.NotContains(t, end.Run.Error.Message, leak)
	}
	h.endedRun(end)
	require.Equal(t, 1, len(model.Requests()))
	require.Len(t, h.stored(), 1)
}

// When a model call finally fails, the provider's own error, hidden from the user, is
// logged for the operator.
func TestFailedModelCallIsLogged(t *testing.T) {
	t.Parallel()
	cause := errors.New(`Post "https://llm.internal.example/v1/chat/completions": x509: certificate signed by unknown authority`)
	model := modeltest.New(modeltest.Turn{Err: &agent.ModelError{Code: agent.CodeModelUnreachable, Message: "the model provider's TLS certificate was refused", Err: cause}})
	var log bytes.Buffer
	l, err := agent.New(agent.Config{Model: model, Logger: zerolog.New(&log), ModelIdleTimeout: -1})
	require.NoError(t, err)
	err = agenttest.Wait(t, agenttest.Run(t.Context(), l, &agenttest.Recorder{}, "hi"), "the run")
	require.Equal(t, agent.CodeModelUnreachable, agenttest.RunError(t, err).Code)

	var line struct {
		Level, Message, Error string
		Attempts              int
	}
	require.NoError(t, json.Unmarshal(log.Bytes(), &line), "one log line: %s", log.String())
	require.Equal(t, "warn", line.Level)
	require.Equal(t, "model call failed", line.Message)
	require.Contains(t, line.Error, cause.Error())
	require.Equal(t, 1, line.Attempts)
}

// --- Step limit ----------------------------------------------------------------------

func TestStepLimitEndsTheRun(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	noop := tool("noop", func(context.Context, json.RawMessage, agent.Env) (string, error) {
		runs.Add(1)
		return "ok", nil
	})
	model := modeltest.Forever(modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("c", "noop", `{}`)}})
	h := newHarness(t, model, withTools(noop), func(c *agent.Config) { c.MaxSteps = 3 })
	h.send("loop forever")

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.NotNil(t, end.Run.Error)
	require.Equal(t, agent.CodeStepLimit, end.Run.Error.Code)
	require.Contains(t, end.Run.Error.Message, "3 steps")
	h.endedRun(end)
	require.Equal(t, 3, len(model.Requests()))
	// The last step's calls are not run: the model would never see their results.
	require.EqualValues(t, 2, runs.Load())

	msgs := h.stored()
	require.Len(t, msgs, 3)
	for i, id := range []string{"c", "c-2"} {
		m := msgs[1+i]
		require.Equal(t, "tool", m.Role)
		require.Equal(t, id, m.Tool.CallID)
		require.Equal(t, "noop", m.Tool.Name)
		require.Equal(t, "ok", m.Tool.Status)
		require.Equal(t, "ok", *m.Tool.Output)
	}
}

func TestDefaultStepLimitIsTwenty(t *testing.T) {
	t.Parallel()
	require.Equal(t, 20, agent.DefaultMaxSteps)
	noop := tool("noop", func(context.Context, json.RawMessage, agent.Env) (string, error) { return "ok", nil })
	model := modeltest.Forever(modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("c", "noop", `{}`)}})
	h := newHarness(t, model, withTools(noop))
	h.send("loop forever")

	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.Equal(t, agent.CodeStepLimit, end.Run.Error.Code)
	require.Equal(t, 20, len(model.Requests()))
	require.Len(t, h.stored(), 20, "the user message and 19 tool calls: the 20th step's is not run")
}

// --- Concurrent tool calls -----------------------------------------------------------

// The calls of one step run at the same time; their results go back in call order,
// whatever order they finish in.
func TestToolCallsRunConcurrentlyAndResultsKeepCallOrder(t *testing.T) {
	t.Parallel()
	order := []string{"a", "b", "c"}
	started := make(chan string, len(order))
	release := map[string]chan struct{}{}
	for _, n := range order {
		release[n] = make(chan struct{})
	}
	work := tool("work", func(ctx context.Context, in json.RawMessage, _ agent.Env) (string, error) {
		var p struct{ Name string }
		if err := json.Unmarshal(in, &p); err != nil {
			return "", err
		}
		gate, ok := release[p.Name]
		if !ok {
			return "", fmt.Errorf("unexpected call %q", p.Name)
		}
		started <- p.Name
		select {
		case <-gate:
			return "out-" + p.Name, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	var calls []agent.ModelEvent
	for _, n := range order {
		calls = append(calls, modeltest.Call("call_"+n, "work", fmt.Sprintf(`{"name":%q}`, n)))
	}
	model := modeltest.New(modeltest.Turn{Events: calls}, modeltest.Say("all done"))
	h := newHarness(t, model, withTools(work), func(c *agent.Config) { c.MaxParallelTools = 3 })
	h.send("go")

	// All three must be running at once: none returns before it is released.
	running := map[string]bool{}
	for range order {
		running[recv(t, started, "the tool calls to run concurrently")] = true
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, running)

	for _, n := range []string{"c", "b", "a"} {
		close(release[n])
		f := h.await("tool.end")
		require.Equal(t, "call_"+n, f.Message.Tool.CallID)
		require.Equal(t, "ok", f.Message.Tool.Status)
		require.Equal(t, "out-"+n, *f.Message.Tool.Output)
	}

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)

	reqs := model.Requests()
	require.Equal(t, 2, len(reqs))
	second := reqs[1].Messages
	require.Len(t, second, 2+len(order))
	var ids []string
	for _, c := range second[1].ToolCalls {
		ids = append(ids, c.ID)
	}
	require.Equal(t, []string{"call_a", "call_b", "call_c"}, ids)
	for i, n := range order {
		require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "call_" + n, ToolName: "work", Result: "out-" + n}, second[2+i])
	}

	msgs := h.stored()
	require.Len(t, msgs, 2+len(order))
	for i, n := range order {
		m := msgs[1+i]
		require.Equal(t, "tool", m.Role)
		require.Equal(t, "call_"+n, m.Tool.CallID, "tool messages are not in call order")
		require.Equal(t, "ok", m.Tool.Status)
		require.Equal(t, "out-"+n, *m.Tool.Output)
		require.Less(t, msgs[i].Position, m.Position)
	}
	require.Equal(t, "all done", msgs[len(msgs)-1].Content)
}

// MaxParallelTools bounds how many calls of a step run at once.
func TestToolCallConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	const n = 4
	var (
		mu                  sync.Mutex
		running, maxRunning int
	)
	started := make(chan int, n)
	release := make(chan struct{})
	slot := tool("slot", func(ctx context.Context, in json.RawMessage, _ agent.Env) (string, error) {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		defer func() {
			mu.Lock()
			running--
			mu.Unlock()
		}()
		var p struct{ N int }
		if err := json.Unmarshal(in, &p); err != nil {
			return "", err
		}
		started <- p.N
		select {
		case <-release:
			return fmt.Sprintf("done %d", p.N), nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	var calls []agent.ModelEvent
	for i := 1; i <= n; i++ {
		calls = append(calls, modeltest.Call(fmt.Sprintf("s%d", i), "slot", fmt.Sprintf(`{"n":%d}`, i)))
	}
	model := modeltest.New(modeltest.Turn{Events: calls}, modeltest.Say("finished"))
	h := newHarness(t, model, withTools(slot), func(c *agent.Config) { c.MaxParallelTools = 2 })
	h.send("go")

	seen := map[int]bool{}
	for range 2 {
		seen[recv(t, started, "two calls to start")] = true
	}
	for i := range n {
		give(t, release, struct{}{}, "a release to a running call")
		if len(seen) < n {
			seen[recv(t, started, fmt.Sprintf("call %d to start", i+3))] = true
		}
	}
	require.Len(t, seen, n)

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)
	mu.Lock()
	peak := maxRunning
	mu.Unlock()
	require.Equal(t, 2, peak, "calls running at once")

	second := model.Requests()[1].Messages
	require.Len(t, second, 2+n)
	msgs := h.stored()
	require.Len(t, msgs, 2+n)
	for i := 1; i <= n; i++ {
		require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: fmt.Sprintf("s%d", i), ToolName: "slot", Result: fmt.Sprintf("done %d", i)}, second[1+i])
		m := msgs[i]
		require.Equal(t, fmt.Sprintf("s%d", i), m.Tool.CallID)
		require.Equal(t, "ok", m.Tool.Status)
		require.Equal(t, fmt.Sprintf("done %d", i), *m.Tool.Output)
	}
}

// --- Failing tools -------------------------------------------------------------------

// A panicking tool is a failed call the model sees; the other call of the step and the
// run go on.
func TestToolPanicBecomesAnErrorResult(t *testing.T) {
	t.Parallel()
	boom := tool("boom", func(context.Context, json.RawMessage, agent.Env) (string, error) {
		panic("kaboom: internal state")
	})
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) { return string(in), nil })
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("p1", "boom", `{}`), modeltest.Call("p2", "echo", `{"x":1}`)}},
		modeltest.Say("The tool failed."),
	)
	h := newHarness(t, model, withTools(boom, echo))
	h.send("go")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)

	msgs := h.stored()
	require.Len(t, msgs, 4)
	crashed := msgs[1]
	require.Equal(t, "p1", crashed.Tool.CallID)
	require.Equal(t, "error", crashed.Tool.Status)
	require.Equal(t, "the tool crashed", *crashed.Tool.Output)
	require.NotContains(t, *crashed.Tool.Output, "kaboom")
	require.Equal(t, "ok", msgs[2].Tool.Status)
	require.Equal(t, `{"x":1}`, *msgs[2].Tool.Output)
	require.Equal(t, "The tool failed.", msgs[3].Content)

	reqs := model.Requests()
	require.Equal(t, 2, len(reqs))
	second := reqs[1].Messages
	require.Len(t, second, 4)
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "p1", ToolName: "boom", Result: "the tool crashed", IsError: true}, second[2])
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "p2", ToolName: "echo", Result: `{"x":1}`}, second[3])
}

// A tool's error is a failed call the model sees, with the error's text; the run goes on.
func TestToolErrorBecomesAnErrorResult(t *testing.T) {
	t.Parallel()
	const text = "the file /tmp/report.txt does not exist"
	fail := tool("read_file", func(context.Context, json.RawMessage, agent.Env) (string, error) {
		return "", errors.New(text)
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("r1", "read_file", `{"path":"/tmp/report.txt"}`)}},
		modeltest.Say("It does not exist."),
	)
	h := newHarness(t, model, withTools(fail))
	h.send("read it")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)

	msgs := h.stored()
	require.Len(t, msgs, 3)
	require.Equal(t, "error", msgs[1].Tool.Status)
	require.Equal(t, text, *msgs[1].Tool.Output)
	require.Equal(t, "It does not exist.", msgs[2].Content)

	reqs := model.Requests()
	require.Equal(t, 2, len(reqs))
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "r1", ToolName: "read_file", Result: text, IsError: true}, reqs[1].Messages[2])
}

// --- Output cap ----------------------------------------------------------------------

// A tool's result is cut to the cap, on a character boundary, and marked.
func TestToolResultIsCapped(t *testing.T) {
	t.Parallel()
	const limit = 1024
	big := strings.Repeat("€", (100<<10)/3+1) // 100 KiB of 3-byte characters
	huge := tool("huge", func(context.Context, json.RawMessage, agent.Env) (string, error) { return big, nil })
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("h1", "huge", `{}`)}},
		modeltest.Say("That is a lot."),
	)
	h := newHarness(t, model, withTools(huge), func(c *agent.Config) { c.MaxToolOutput = limit })
	h.send("go")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	msgs := h.stored()
	require.Len(t, msgs, 3)
	require.Equal(t, "ok", msgs[1].Tool.Status)
	out := *msgs[1].Tool.Output
	require.LessOrEqual(t, len(out), limit+100, "the stored output is not capped")
	require.Contains(t, out, "output truncated")
	require.True(t, utf8.ValidString(out))
	require.NotContains(t, out, "\uFFFD", "a character was cut")
	// The head and the tail are kept (the end of output is where exit codes and the last
	// error are), around a marker.
	head, rest, ok := strings.Cut(out, "\n… [output truncated: ")
	require.True(t, ok)
	_, tail, ok := strings.Cut(rest, "] …\n")
	require.True(t, ok)
	require.Equal(t, strings.Repeat("€", len(head)/3), head)
	require.Equal(t, strings.Repeat("€", len(tail)/3), tail)
	require.LessOrEqual(t, len(head)+len(tail), limit)
	require.GreaterOrEqual(t, len(head)+len(tail), limit-6)
	require.Contains(t, rest, fmt.Sprintf("%d bytes not shown", len(big)-len(head)-len(tail)))

	second := model.Requests()[1].Messages
	require.LessOrEqual(t, len(second[2].Result), limit+100, "the model was sent the whole output")
	require.Equal(t, agent.Message{Role: agent.RoleTool, ToolCallID: "h1", ToolName: "huge", Result: out}, second[2])
}

// Output streamed through env.Output() stops at the cap, marked, in whole characters.
func TestStreamedToolOutputIsCapped(t *testing.T) {
	t.Parallel()
	const limit = 1024
	content := strings.Repeat("ab€", (100<<10)/5) // 100 KiB
	stream := tool("stream", func(_ context.Context, _ json.RawMessage, env agent.Env) (string, error) {
		w := env.Output()
		for i := 0; i < len(content); i += 7 { // 7-byte writes split many characters
			if _, err := w.Write([]byte(content[i:min(i+7, len(content))])); err != nil {
				return "", err
			}
		}
		return "", nil
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("s1", "stream", `{}`)}},
		modeltest.Say("done"),
	)
	h := newHarness(t, model, withTools(stream), func(c *agent.Config) { c.MaxToolOutput = limit })
	h.send("go")

	var pieces []string
	h.sub.Await(t, func(f wstest.Frame) bool {
		if f.Type == "tool.output" {
			pieces = append(pieces, *f.Text)
		}
		return f.Type == "tool.end"
	})
	require.Equal(t, "chat.done", h.end().Type)

	require.NotEmpty(t, pieces)
	for _, p := range pieces {
		require.True(t, utf8.ValidString(p), "tool.output %q is not valid UTF-8", p)
		require.NotContains(t, p, "\uFFFD", "a character split across writes arrived broken")
	}
	streamed := strings.Join(pieces, "")
	kept := 0
	for kept < len(streamed) && kept < len(content) && streamed[kept] == content[kept] {
		kept++
	}
	require.LessOrEqual(t, kept, limit, "streamed past the cap")
	require.GreaterOrEqual(t, kept, limit-8, "streamed much less than the cap")
	marker := streamed[kept:]
	require.Contains(t, marker, "output truncated")
	require.Less(t, len(marker), 100)

	msgs := h.stored()
	require.Len(t, msgs, 3)
	require.Equal(t, "ok", msgs[1].Tool.Status)
	require.Equal(t, streamed, *msgs[1].Tool.Output, "the stored output is not what was streamed")
}

// A character split across two writes arrives whole.
func TestStreamedToolOutputKeepsSplitCharactersWhole(t *testing.T) {
	t.Parallel()
	writes := []string{"price: ", "\xe2\x82", "\xac", "5 ", "\xf0\x9f", "\x98", "\x80", "!"}
	stream := tool("stream", func(_ context.Context, _ json.RawMessage, env agent.Env) (string, error) {
		for _, w := range writes {
			if _, err := env.Output().Write([]byte(w)); err != nil {
				return "", err
			}
		}
		return "", nil
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("s1", "stream", `{}`)}},
		modeltest.Say("done"),
	)
	h := newHarness(t, model, withTools(stream))
	h.send("go")

	var pieces []string
	h.sub.Await(t, func(f wstest.Frame) bool {
		if f.Type == "tool.output" {
			pieces = append(pieces, *f.Text)
		}
		return f.Type == "tool.end"
	})
	require.Equal(t, "chat.done", h.end().Type)
	for _, p := range pieces {
		require.True(t, utf8.ValidString(p), "tool.output %q is not valid UTF-8", p)
		require.NotContains(t, p, "\uFFFD")
	}
	require.Equal(t, "price: €5 😀!", strings.Join(pieces, ""))
	msgs := h.stored()
	require.Equal(t, "price: €5 😀!", *msgs[1].Tool.Output)
}

// --- Bad calls -----------------------------------------------------------------------

// A call to a tool that does not exist is stored, ends in error, and the model is told.
func TestUnknownToolIsAnErrorResult(t *testing.T) {
	t.Parallel()
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) { return string(in), nil })
	model := modeltest.New(
		modeltest.Turn{Events: modeltest.Events(modeltest.Text("Trying."), []agent.ModelEvent{modeltest.Call("u1", "teleport", `{"to":"mars"}`)})},
		modeltest.Say("There is no such tool."),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("go")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)

	msgs := h.stored()
	require.Len(t, msgs, 4)
	require.Equal(t, "Trying.", msgs[1].Content)
	call := msgs[2]
	require.Equal(t, "tool", call.Role)
	require.Equal(t, "u1", call.Tool.CallID)
	require.Equal(t, "teleport", call.Tool.Name)
	require.JSONEq(t, `{"to":"mars"}`, string(call.Tool.Input))
	require.Equal(t, "error", call.Tool.Status)
	require.Contains(t, *call.Tool.Output, "teleport")
	require.Equal(t, "There is no such tool.", msgs[3].Content)

	result := model.Requests()[1].Messages[2]
	require.Equal(t, agent.RoleTool, result.Role)
	require.Equal(t, "u1", result.ToolCallID)
	require.True(t, result.IsError)
	require.Contains(t, result.Result, "teleport")
}

// A call whose input is not JSON is stored (its input as a JSON string), ends in error
// without running the tool, and the model is told.
func TestInvalidToolInputIsAnErrorResult(t *testing.T) {
	t.Parallel()
	var ran atomic.Bool
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) {
		ran.Store(true)
		return string(in), nil
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("j1", "echo", `{"a":`)}},
		modeltest.Say("Sorry."),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("go")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)
	require.False(t, ran.Load(), "the tool ran with invalid input")

	msgs := h.stored()
	require.Len(t, msgs, 3)
	call := msgs[1]
	require.Equal(t, "j1", call.Tool.CallID)
	var input string
	require.NoError(t, json.Unmarshal(call.Tool.Input, &input), "input not stored as a JSON string: %s", call.Tool.Input)
	require.Equal(t, `{"a":`, input)
	require.Equal(t, "error", call.Tool.Status)
	require.Contains(t, *call.Tool.Output, "not valid JSON")
	require.Equal(t, "Sorry.", msgs[2].Content)

	result := model.Requests()[1].Messages[2]
	require.Equal(t, "j1", result.ToolCallID)
	require.True(t, result.IsError)
	require.Contains(t, result.Result, "not valid JSON")
}

// --- Cancellation --------------------------------------------------------------------

// observedModel reports how each Stream call returned.
type observedModel struct {
	agent.Model
	returned chan error
}

func (m *observedModel) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	err := m.Model.Stream(ctx, req, emit)
	m.returned <- err
	return err
}

// Cancelling while the model streams keeps the partial text as cancelled and cancels
// the model call.
func TestCancelDuringModelStreaming(t *testing.T) {
	t.Parallel()
	scripted := modeltest.New(modeltest.Turn{Events: modeltest.Text("Partial", " answer"), Hang: true})
	model := &observedModel{Model: scripted, returned: make(chan error, 1)}
	h := newHarness(t, model)
	h.send("tell me a long story")

	h.await("chat.delta")
	h.await("chat.delta")
	res, err := h.actor.Cancel(context.Background(), uuid.Nil)
	require.NoError(t, err)

	end := h.end()
	require.Equal(t, "chat.cancelled", end.Type)
	require.Equal(t, res.RunID.String(), end.RunID)
	require.Nil(t, end.Run.Error)
	run := h.endedRun(end)
	require.Equal(t, chat.RunCancelled, run.Status)
	require.Equal(t, chat.CancelUser, run.CancelReason)

	streamErr := recv(t, model.returned, "the model call to return")
	require.ErrorIs(t, streamErr, context.Canceled, "the model's context was not cancelled")
	require.Equal(t, 1, len(scripted.Requests()))

	msgs := h.stored()
	require.Len(t, msgs, 2)
	require.Equal(t, "assistant", msgs[1].Role)
	require.Equal(t, "Partial answer", msgs[1].Content)
	require.Equal(t, "cancelled", msgs[1].Status)
}

// A tool that only streams its output (and returns nothing) gives the model what the
// user saw.
func TestStreamedOnlyOutputReachesTheModel(t *testing.T) {
	t.Parallel()
	streamer := tool("streamer", func(_ context.Context, _ json.RawMessage, env agent.Env) (string, error) {
		_, err := io.WriteString(env.Output(), "line one\nline two\n")
		return "", err
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("s", "streamer", `{}`)}},
		modeltest.Say("ok"),
	)
	h := newHarness(t, model, withTools(streamer))
	h.send("go")
	require.Equal(t, "chat.done", h.end().Type)
	require.Equal(t, "line one\nline two\n", *h.stored()[1].Tool.Output)
	require.Equal(t, "line one\nline two\n", model.Requests()[1].Messages[2].Result)
}

// Ids and inputs the model produces that cannot be stored become failed calls the model
// hears about; they do not end the run.
func TestUnstorableModelOutputIsAToolError(t *testing.T) {
	t.Parallel()
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) { return string(in), nil })
	longID := strings.Repeat("x", 300)
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{
			modeltest.Call("nul", "echo", `{"x":"a\u0000b"}`),
			modeltest.Call(longID, "echo", `{"ok":true}`),
			modeltest.Call("badutf8", "echo", "{\"x\":\"\xff\"}"),
		}},
		modeltest.Say("carried on"),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("go")
	require.Equal(t, "chat.done", h.end().Type)
	msgs := h.stored()
	require.Len(t, msgs, 5)
	require.Equal(t, "error", msgs[1].Tool.Status)
	require.Equal(t, "ok", msgs[2].Tool.Status, "a long id is replaced, the call runs")
	require.Equal(t, "call", msgs[2].Tool.CallID)
	require.Equal(t, "error", msgs[3].Tool.Status)
	results := model.Requests()[1].Messages[2:5]
	require.True(t, results[0].IsError)
	require.False(t, results[1].IsError)
	require.True(t, results[2].IsError)
}

// A failed call's result tells the model why, even when the tool also returned output.
func TestFailedCallWithOutputTellsTheModelWhy(t *testing.T) {
	t.Parallel()
	partial := tool("partial", func(context.Context, json.RawMessage, agent.Env) (string, error) {
		return "some output", errors.New("the command was stopped after 2m0s")
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("p", "partial", `{}`)}},
		modeltest.Say("noted"),
	)
	h := newHarness(t, model, withTools(partial))
	h.send("go")
	require.Equal(t, "chat.done", h.end().Type)
	res := model.Requests()[1].Messages[2]
	require.True(t, res.IsError)
	require.Equal(t, "some output\n[error: the command was stopped after 2m0s]", res.Result)
}

// A retry-after beyond a minute is not waited out silently: the run ends with the error.
func TestLongRetryAfterIsNotWaitedFor(t *testing.T) {
	t.Parallel()
	model := modeltest.New(modeltest.Turn{Err: modeltest.TransientAfter("rate_limited", time.Hour)})
	h := newHarness(t, model)
	h.send("go")
	end := h.end()
	require.Equal(t, "chat.error", end.Type)
	require.Equal(t, "rate_limited", end.Run.Error.Code)
	require.Len(t, model.Requests(), 1)
}

// A tool name no provider could have declared (here with a space) is validated as a tool
// name, not as a call id: the call is stored as "unnamed" and ends in error, and nothing
// runs.
func TestInvalidToolNameIsAnErrorResult(t *testing.T) {
	t.Parallel()
	var ran atomic.Bool
	echo := tool("echo", func(_ context.Context, in json.RawMessage, _ agent.Env) (string, error) {
		ran.Store(true)
		return string(in), nil
	})
	model := modeltest.New(
		modeltest.Turn{Events: []agent.ModelEvent{modeltest.Call("n1", "echo me", `{}`)}},
		modeltest.Say("Sorry."),
	)
	h := newHarness(t, model, withTools(echo))
	h.send("go")

	end := h.end()
	require.Equal(t, "chat.done", end.Type)
	h.endedRun(end)
	require.False(t, ran.Load())

	msgs := h.stored()
	require.Len(t, msgs, 3)
	call := msgs[1]
	require.Equal(t, "n1", call.Tool.CallID)
	require.Equal(t, "unnamed", call.Tool.Name)
	require.Equal(t, "error", call.Tool.Status)

	result := model.Requests()[1].Messages[2]
	require.Equal(t, "n1", result.ToolCallID)
	require.True(t, result.IsError)
}
