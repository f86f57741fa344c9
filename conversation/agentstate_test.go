package conversation_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/chat"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/conversation/convtest"
	"github.com/chatd/chatd/store/storetest"
)

// stateAgent is an agent that keeps state: each run reads the session's state, reports
// the states its script gives (refusals recorded), and ends.
type stateAgent struct {
	report map[string][]string // by the run's content: the states it reports
	seen   chan string         // the state each run was given ("" for none)
	errs   chan error          // each report's answer
}

func (s *stateAgent) Run(_ context.Context, req conversation.Request, out conversation.Emitter) error {
	state, err := req.AgentState()
	if err != nil {
		return err
	}
	s.seen <- string(state)
	for _, st := range s.report[req.Content] {
		s.errs <- out.State(json.RawMessage(st))
	}
	return out.Text("ok")
}

// An agent's state is the run's, stored with it, and given back to the session's next
// run: from memory on the same actor, from the database on the next one (the newest run
// that has one, past runs that reported none). It is checked, and no tab is told.
func TestAgentStateStoredAndGivenBack(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	session := uuid.New()
	big := `"` + strings.Repeat("x", chat.MaxAgentState) + `"`
	agent := &stateAgent{
		report: map[string][]string{
			"one":   {`{"n": 0}`, "{not json", big, "", `{"n": 1, "items": ["a"]}`},
			"three": {`[3]`},
		},
		seen: make(chan string, 10), errs: make(chan error, 10),
	}
	start := func() (*conversation.Actor, *convtest.Recorder) {
		a := conversation.Start(conversation.Config{
			Store: st, Agent: agent,
			Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		}, session, nil)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = a.Stop(ctx)
			_ = a.Wait(ctx)
		})
		tab := convtest.New()
		_, err := a.Hello(testCtx(t), conversation.HelloRequest{Create: true, Subscriber: tab})
		require.NoError(t, err)
		tab.AwaitCatchUp(t, 1)
		return a, tab
	}
	send := func(a *conversation.Actor, tab *convtest.Recorder, content string) uuid.UUID {
		t.Helper()
		res, err := a.Send(testCtx(t), conversation.SendRequest{RequestID: content, Content: content})
		require.NoError(t, err)
		require.EqualValues(t, "chat.done", tab.Await(t, convtest.Terminal).Type)
		for _, ev := range tab.Events() {
			require.NotEqual(t, conversation.EventRunStatus, ev.Type, "a state report is no tab's business")
		}
		require.NoError(t, a.Flush(testCtx(t)))
		return res.RunID
	}
	stored := func(run uuid.UUID) string {
		t.Helper()
		r, err := st.RunGet(testCtx(t), run)
		require.NoError(t, err)
		return string(r.AgentState)
	}

	first, tab := start()
	one := send(first, tab, "one")
	require.Equal(t, "", <-agent.seen, "a new session has no state")
	var answers []string
	for range agent.report["one"] {
		err := <-agent.errs
		if err == nil {
			answers = append(answers, "ok")
			continue
		}
		var ce *conversation.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, conversation.CodeBadRequest, ce.Code)
		answers = append(answers, ce.Message)
	}
	require.Equal(t, []string{
		"ok", "agent state is not JSON",
		"agent state is 262146 bytes; the limit is 262144",
		"agent state is not JSON", "ok",
	}, answers)
	require.JSONEq(t, `{"n":1,"items":["a"]}`, stored(one), "the last accepted report is the run's")

	two := send(first, tab, "two")
	require.JSONEq(t, `{"n":1,"items":["a"]}`, <-agent.seen, "the next run is given it")
	require.Empty(t, stored(two), "a run that reports none stores none")

	require.NoError(t, first.Stop(testCtx(t)))
	require.NoError(t, first.Wait(testCtx(t)))
	second, tab := start()
	three := send(second, tab, "three")
	require.JSONEq(t, `{"n":1,"items":["a"]}`, <-agent.seen, "another actor reads the newest stored state")
	require.NoError(t, <-agent.errs)
	require.Equal(t, `[3]`, stored(three))
	send(second, tab, "four")
	require.Equal(t, `[3]`, <-agent.seen)
}
