package agent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent"
)

// A continued answer whose prompt lost the cut-off text's trailing white space does not
// repeat it: the user already has it. What the model writes otherwise is kept.
func TestSkipRepeatedSpace(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cont   string
		deltas []string
		want   []string
	}{
		{"Hello ", []string{" world", " again"}, []string{"world", " again"}},
		{"Hello ", []string{"world"}, []string{"world"}},
		{"Hello ", []string{" ", " world"}, []string{" world"}}, // two spaces meant: one is new
		{"end.\n\n", []string{"\n", "\nNext"}, []string{"Next"}},
		{"end.\n\n", []string{"\n", " Next"}, []string{" Next"}},
		{"end. ", []string{"\n\nNext"}, []string{"\n\nNext"}},
		{"The answer is fo", []string{" rty"}, []string{" rty"}}, // no space to repeat
		{"x\u3000", []string{"\u3000y"}, []string{"y"}},
		{"x\u3000", []string{"\u3001"}, []string{"\u3001"}},
	} {
		var got []string
		emit := agent.SkipRepeatedSpace(c.cont, func(ev agent.ModelEvent) error {
			if ev.Kind == agent.EventText {
				got = append(got, ev.Text)
			}
			return nil
		})
		require.NoError(t, emit(agent.ModelEvent{Kind: agent.EventReasoning, Reasoning: agent.Reasoning{Text: "hmm"}}))
		for _, d := range c.deltas {
			require.NoError(t, emit(agent.ModelEvent{Kind: agent.EventText, Text: d}))
		}
		require.Equal(t, c.want, got, "%q then %q", c.cont, c.deltas)
	}
}
