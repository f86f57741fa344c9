package agenttest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/conversation"
)

// Collect makes one model call and returns the events it streamed, keep-alives left
// out: how many there are depends on how the network splits the response.
func Collect(t testing.TB, m agent.Model, req agent.ModelRequest) ([]agent.ModelEvent, error) {
	t.Helper()
	var evs []agent.ModelEvent
	err := m.Stream(t.Context(), req, func(ev agent.ModelEvent) error {
		if ev.Kind != agent.EventKeepAlive {
			evs = append(evs, ev)
		}
		return nil
	})
	return evs, err
}

// ModelError asserts err is (or wraps) a *agent.ModelError and returns it.
func ModelError(t testing.TB, err error) *agent.ModelError {
	t.Helper()
	var me *agent.ModelError
	require.True(t, errors.As(err, &me), "want a *agent.ModelError, got %T: %v", err, err)
	return me
}

// RunError asserts err is (or wraps) a *conversation.Error, a run's error as the user
// sees it, and returns it.
func RunError(t testing.TB, err error) *conversation.Error {
	t.Helper()
	var ce *conversation.Error
	require.True(t, errors.As(err, &ce), "want a *conversation.Error, got %T: %v", err, err)
	return ce
}

// NewLoop returns an agent loop on m with tools, on a fake clock (the retry backoff waits
// for it) and with no idle timeout (so the backoff is the clock's only timer).
func NewLoop(t testing.TB, m agent.Model, tools ...agent.Tool) (*agent.Loop, *clockwork.FakeClock) {
	t.Helper()
	reg, err := agent.NewRegistry(tools...)
	require.NoError(t, err)
	clock := clockwork.NewFakeClock()
	l, err := agent.New(agent.Config{Model: m, Tools: reg, Clock: clock, ModelIdleTimeout: -1})
	require.NoError(t, err)
	return l, clock
}

// Run runs one user message through l in the background, emitting to rec; the channel
// receives its result.
func Run(ctx context.Context, l *agent.Loop, rec *Recorder, content string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx, conversation.Request{Content: content}, rec) }()
	return done
}

// Wait receives from ch, failing the test after 10 seconds.
func Wait[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Give sends v on ch, failing the test after 10 seconds.
func Give[T any](t testing.TB, ch chan<- T, v T, what string) {
	t.Helper()
	select {
	case ch <- v:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out handing over %s", what)
	}
}

// KeepAlives wraps m so that a test learns of each keep-alive m emits once the loop
// has taken it (and so restarted its idle timer): a value is sent on taken. A test on
// a fake clock waits for it before it moves the clock on.
func KeepAlives(m agent.Model, taken chan<- struct{}) agent.Model {
	return keepAlives{m, taken}
}

type keepAlives struct {
	agent.Model
	taken chan<- struct{}
}

func (k keepAlives) Stream(ctx context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	return k.Model.Stream(ctx, req, func(ev agent.ModelEvent) error {
		err := emit(ev)
		if ev.Kind == agent.EventKeepAlive {
			select {
			case k.taken <- struct{}{}:
			case <-ctx.Done():
			}
		}
		return err
	})
}

// WaitKeepingAlive is Wait for a run on a model wrapped by KeepAlives: it takes the
// keep-alive notices that come meanwhile.
func WaitKeepingAlive(t testing.TB, done <-chan error, taken <-chan struct{}) error {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case <-taken:
		case err := <-done:
			return err
		case <-timeout:
			t.Fatal("timed out waiting for the run")
		}
	}
}

// ExpectRetry checks that a loop on clock, having made `made` requests to srv, waits
// exactly wait before the next attempt: it is waiting on the clock with no further
// request 1ms short of wait, and the clock then moves on to wait.
func ExpectRetry(t testing.TB, clock *clockwork.FakeClock, srv *Server, made int, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "the loop is not waiting to retry")
	require.Len(t, srv.Requests(), made)
	clock.Advance(wait - time.Millisecond)
	// Had the wait been shorter, the timer would have fired and gone, and this would
	// time out.
	require.NoError(t, clock.BlockUntilContext(ctx, 1), "retried before %s", wait)
	require.Len(t, srv.Requests(), made, "retried before %s", wait)
	clock.Advance(time.Millisecond)
}

// Weather is a tool for loop tests: get_weather {"location": …} answers
// "15°C, sunny in <location>".
type Weather struct{}

// Spec describes get_weather.
func (Weather) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name: "get_weather", Description: "Get the current weather in a given location.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}`),
	}
}

// Run answers from the input alone.
func (Weather) Run(ctx context.Context, input json.RawMessage, env agent.Env) (string, error) {
	var in struct{ Location string }
	if err := json.Unmarshal(input, &in); err != nil {
		return "", err
	}
	return "15°C, sunny in " + in.Location, nil
}

// ExpectModelError asserts err is a *agent.ModelError with code and transient, and
// returns it.
func ExpectModelError(t testing.TB, err error, code string, transient bool) *agent.ModelError {
	t.Helper()
	me := ModelError(t, err)
	require.Equal(t, code, me.Code, "error code")
	require.Equal(t, transient, me.Transient, "transient")
	return me
}
