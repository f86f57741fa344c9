package synth

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
)

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
	}{
		{"", Spec{Tokens: DefaultTokens, Rate: DefaultRate}},
		{"synth tokens=7 rate=0 tools=2", Spec{Tokens: 7, Rate: 0, Tools: 2}},
		{"tokens=-3 rate=x tools=", Spec{Tokens: DefaultTokens, Rate: DefaultRate}},
		{"tokens=999999999999 tools=5000", Spec{Tokens: MaxTokens, Rate: DefaultRate, Tools: MaxTools}},
	} {
		assert.Equal(t, tc.want, ParseSpec(tc.in), tc.in)
	}
}

// A run with tools is streamed across steps: every token exactly once, in order, with a
// tool call between the steps and none after the last.
func TestStepsStreamEveryTokenOnce(t *testing.T) {
	m := &Model{}
	msgs := []agent.Message{{Role: agent.RoleUser, Text: "tokens=10 rate=0 tools=2"}}
	var text strings.Builder
	calls := 0
	for step := 0; step < 3; step++ {
		var call *agent.ToolCall
		err := m.Stream(context.Background(), agent.ModelRequest{Messages: msgs}, func(ev agent.ModelEvent) error {
			switch ev.Kind {
			case agent.EventText:
				text.WriteString(ev.Text)
			case agent.EventToolCall:
				call = &ev.ToolCall
			}
			return nil
		})
		require.NoError(t, err)
		if step < 2 {
			require.NotNil(t, call, "step %d", step)
			assert.Equal(t, ToolName, call.Name)
			calls++
			msgs = append(msgs,
				agent.Message{Role: agent.RoleAssistant, ToolCalls: []agent.ToolCall{*call}},
				agent.Message{Role: agent.RoleTool, ToolCallID: call.ID, Result: "now"})
		} else {
			assert.Nil(t, call, "the last step calls no tool")
		}
	}
	assert.Equal(t, 2, calls)
	fields := strings.Fields(text.String())
	require.Len(t, fields, 10)
	for i, f := range fields {
		idx, stamp, ok := strings.Cut(f, ":")
		require.True(t, ok, f)
		assert.Equal(t, strconv.Itoa(i), idx)
		ns, err := strconv.ParseInt(stamp, 10, 64)
		require.NoError(t, err)
		assert.WithinDuration(t, time.Now(), time.Unix(0, ns), time.Minute)
	}
}

func TestStreamStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := (&Model{}).Stream(ctx, agent.ModelRequest{Messages: []agent.Message{{Role: agent.RoleUser, Text: "tokens=1000000 rate=0"}}},
		func(ev agent.ModelEvent) error {
			if n++; n == 5 {
				cancel()
			}
			return nil
		})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 5, n)
}

func TestTokenFormat(t *testing.T) {
	assert.Equal(t, " 41:1763712000123456789", Token(41, time.Unix(0, 1763712000123456789)))
}

// A token that gets out late (the model was held up, say by a full inbox) carries the
// time it was due, so the delay is measured rather than hidden.
func TestLateTokensCarryTheirScheduledTime(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	calls := 0
	m := &Model{Now: func() time.Time {
		calls++
		if calls == 1 {
			return t0 // the run's start
		}
		return t0.Add(time.Hour) // every token is already overdue
	}}
	var got []string
	err := m.Stream(context.Background(), agent.ModelRequest{Messages: []agent.Message{{Role: agent.RoleUser, Text: "tokens=4 rate=10"}}},
		func(ev agent.ModelEvent) error {
			if ev.Kind == agent.EventText {
				got = append(got, ev.Text)
			}
			return nil
		})
	require.NoError(t, err)
	want := make([]string, 4)
	for i := range want {
		want[i] = Token(i, t0.Add(time.Duration(i)*100*time.Millisecond))
	}
	assert.Equal(t, want, got)
}
