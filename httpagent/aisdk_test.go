package httpagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/agent/agenttest"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/httpagent"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"), goleak.IgnoreAnyFunction("internal/poll.runtime_pollWait"))
}

// route is a fake AI SDK route: each request gets the next answer, and is kept.
type route struct {
	mu      sync.Mutex
	answers []func(w http.ResponseWriter, body map[string]any)
	bodies  []map[string]any
	headers []http.Header
	arrived chan int
}

func (rt *route) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	rt.mu.Lock()
	rt.bodies = append(rt.bodies, body)
	rt.headers = append(rt.headers, r.Header.Clone())
	n := len(rt.bodies)
	var a func(http.ResponseWriter, map[string]any)
	if len(rt.answers) > 0 {
		a, rt.answers = rt.answers[0], rt.answers[1:]
	}
	rt.mu.Unlock()
	if rt.arrived != nil {
		rt.arrived <- n
	}
	if a == nil {
		http.Error(w, "nothing scripted", http.StatusTeapot)
		return
	}
	a(w, body)
}

func stream(chunks ...string) func(http.ResponseWriter, map[string]any) {
	return func(w http.ResponseWriter, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range chunks {
			fmt.Fprintf(w, "data: %s\n\n", c)
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}
}

func newAgent(t *testing.T, rt *route, clock clockwork.Clock) *httpagent.AISDK {
	t.Helper()
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	a, err := httpagent.NewAISDK(httpagent.Config{URL: srv.URL, Protocol: httpagent.ProtocolAISDK, Clock: clock})
	require.NoError(t, err)
	return a
}

func request() conversation.Request {
	return conversation.Request{SessionID: uuid.New(), RunID: uuid.New(), RequestID: "u1", Owner: "alice", Content: "transfer 5"}
}

// An approval request ends the turn; the decision goes back in the next one as the
// SDK's client sends it (the tool part approval-responded), and the route's result of
// the call ends it.
func TestAISDKApprovalContinuation(t *testing.T) {
	rt := &route{}
	rt.answers = append(rt.answers,
		stream(`{"type":"start"}`, `{"type":"start-step"}`, `{"type":"text-delta","id":"t","delta":"Sure."}`,
			`{"type":"tool-input-available","toolCallId":"c1","toolName":"transfer","input":{"amount":5}}`,
			`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1"}`, `{"type":"finish-step"}`, `{"type":"finish"}`),
		func(w http.ResponseWriter, body map[string]any) {
			msgs := body["messages"].([]any)
			last := msgs[len(msgs)-1].(map[string]any)
			var part map[string]any
			for _, p := range last["parts"].([]any) {
				if p.(map[string]any)["type"] == "tool-transfer" {
					part = p.(map[string]any)
				}
			}
			if part == nil || part["state"] != "approval-responded" || part["approval"].(map[string]any)["approved"] != true {
				http.Error(w, fmt.Sprintf("no approval response: %v", last), http.StatusBadRequest)
				return
			}
			stream(`{"type":"start"}`, `{"type":"tool-output-available","toolCallId":"c1","output":"transferred 5"}`,
				`{"type":"text-delta","id":"t2","delta":"Done."}`, `{"type":"finish","messageMetadata":{"usage":{"inputTokens":7,"outputTokens":3}}}`)(w, body)
		})
	a := newAgent(t, rt, clockwork.NewRealClock())
	rec := &agenttest.Recorder{}
	require.NoError(t, a.Run(context.Background(), request(), rec))
	require.Equal(t, []string{
		"text: Sure.",
		`tool.approval: c1 transfer {"amount":5}`,
		"tool.end: c1 ok transferred 5",
		"text: Done.",
		"usage: 7 3 0 0",
	}, rec.Log())
	require.Equal(t, []string{"1", "2"}, []string{rt.headers[0].Get("X-Chatd-Turn"), rt.headers[1].Get("X-Chatd-Turn")})
	require.Equal(t, "alice", rt.headers[1].Get("X-Chatd-User"))
	first := rt.bodies[0]["messages"].([]any)
	require.Len(t, first, 1, "the user's message")
}

// A 503 is asked again after the backoff (on the agent's clock); the attempt counts up.
func TestAISDKRetriesA503(t *testing.T) {
	rt := &route{arrived: make(chan int, 4)}
	rt.answers = append(rt.answers,
		func(w http.ResponseWriter, _ map[string]any) { http.Error(w, "busy", http.StatusServiceUnavailable) },
		stream(`{"type":"text-delta","id":"t","delta":"ok"}`, `{"type":"finish"}`))
	clock := clockwork.NewFakeClock()
	a := newAgent(t, rt, clock)
	rec := &agenttest.Recorder{}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background(), request(), rec) }()
	<-rt.arrived
	// The backoff's timer is made once the 503 is read: advance until the run ends.
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			clock.Advance(300 * time.Millisecond)
		}
	}
	require.NoError(t, err)
	require.Equal(t, "ok", rec.Reply())
	require.Equal(t, []string{"1", "2"}, []string{rt.headers[0].Get("X-Chatd-Attempt"), rt.headers[1].Get("X-Chatd-Attempt")})
}

// What is not the protocol ends the run with agent_bad_response, naming what was wrong.
func TestAISDKBadResponses(t *testing.T) {
	for name, c := range map[string]struct {
		answer func(http.ResponseWriter, map[string]any)
		want   string
	}{
		"not a stream": {func(w http.ResponseWriter, _ map[string]any) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html>")
		}, "not a UI message stream"},
		"not JSON":     {stream(`{"type":`), "not the UI message stream's"},
		"a 404":        {func(w http.ResponseWriter, _ map[string]any) { http.Error(w, "no route", http.StatusNotFound) }, "HTTP 404"},
		"stray result": {stream(`{"type":"tool-output-available","toolCallId":"zz","output":"x"}`), `call "zz"`},
	} {
		t.Run(name, func(t *testing.T) {
			a := newAgent(t, &route{answers: []func(http.ResponseWriter, map[string]any){c.answer}}, clockwork.NewRealClock())
			err := a.Run(context.Background(), request(), &agenttest.Recorder{})
			var e *conversation.Error
			require.True(t, errors.As(err, &e), "%v", err)
			require.Equal(t, httpagent.CodeBadResponse, e.Code)
			require.Contains(t, e.Message, c.want)
		})
	}
	// The route's own error chunk is the run's error, with its text.
	a := newAgent(t, &route{answers: []func(http.ResponseWriter, map[string]any){stream(`{"type":"error","errorText":"rate limit of the model"}`)}}, clockwork.NewRealClock())
	err := a.Run(context.Background(), request(), &agenttest.Recorder{})
	var e *conversation.Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, "agent_error", e.Code)
	require.True(t, strings.Contains(e.Message, "rate limit"))
}

// An approval nobody decides expires after ApprovalExpire (on the agent's clock): the
// call is denied as expired and the next turn tells the route so.
func TestAISDKApprovalExpires(t *testing.T) {
	rt := &route{}
	rt.answers = append(rt.answers,
		stream(`{"type":"tool-input-available","toolCallId":"c1","toolName":"transfer","input":{"amount":5}}`,
			`{"type":"tool-approval-request","approvalId":"a1","toolCallId":"c1"}`, `{"type":"finish"}`),
		func(w http.ResponseWriter, body map[string]any) {
			msgs := body["messages"].([]any)
			parts := msgs[len(msgs)-1].(map[string]any)["parts"].([]any)
			approved := parts[len(parts)-1].(map[string]any)["approval"].(map[string]any)["approved"]
			stream(fmt.Sprintf(`{"type":"text-delta","id":"t","delta":"approved=%v"}`, approved), `{"type":"finish"}`)(w, body)
		})
	clock := clockwork.NewFakeClock()
	srv := httptest.NewServer(rt)
	t.Cleanup(srv.Close)
	a, err := httpagent.NewAISDK(httpagent.Config{URL: srv.URL, Clock: clock, ApprovalExpire: time.Hour})
	require.NoError(t, err)
	rec := &agenttest.Recorder{Hold: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background(), request(), rec) }()
	require.Equal(t, "c1", <-rec.Hold)
	var runErr error
	for waiting := true; waiting; {
		select {
		case runErr = <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			clock.Advance(10 * time.Minute)
		}
	}
	require.NoError(t, runErr)
	require.Contains(t, rec.Log(), "expire: c1")
	require.Equal(t, "approved=false", rec.Reply())
}
