package wstest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/chatd/chatd/transport/wstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func decode(t *testing.T, s string) wstest.Frame {
	t.Helper()
	f, err := wstest.Decode([]byte(s))
	require.NoError(t, err)
	return f
}

// The state the tests compare must reject every violation of the protocol's guarantee,
// or the property tests would pass on a broken server.
func TestStateEnforcesTheGuarantee(t *testing.T) {
	snapshot := `{"type":"snapshot","sessionId":"s","epoch":"e","lastSeq":4,"messages":[{"id":"m1","position":1,"role":"user","content":"hi","status":"complete"}],"hasMore":false,"activeRun":null}`
	fresh := func() *wstest.State {
		s := wstest.NewState()
		require.NoError(t, s.Apply(decode(t, snapshot)))
		return s
	}

	s := fresh()
	require.EqualValues(t, 4, s.LastSeq)
	require.NoError(t, s.Apply(decode(t, `{"type":"assistant.segment.started","seq":5,"message":{"id":"m2","position":2,"role":"assistant","content":"","status":"streaming","parentId":"m1"}}`)))
	require.NoError(t, s.Apply(decode(t, `{"type":"chat.delta","seq":6,"messageId":"m2","text":"a"}`)))
	require.NoError(t, s.Apply(decode(t, `{"type":"chat.delta","seq":7,"messageId":"m2","text":"b"}`)))
	require.NoError(t, s.Apply(decode(t, `{"type":"assistant.segment.ended","seq":8,"messageId":"m2","status":"error","error":{"code":"x","message":"y"}}`)))
	m := s.Sorted()[1]
	require.Equal(t, "ab", m.Content)
	require.Equal(t, "error", m.Status)
	require.Equal(t, &wstest.ErrorInfo{Code: "x", Message: "y"}, m.Error)

	for name, frame := range map[string]string{
		"a gap":                    `{"type":"chat.delta","seq":6,"messageId":"m1","text":"x"}`,
		"a duplicate":              `{"type":"chat.delta","seq":4,"messageId":"m1","text":"x"}`,
		"unknown message":          `{"type":"chat.delta","seq":5,"messageId":"nope","text":"x"}`,
		"unknown type":             `{"type":"chat.mystery","seq":5}`,
		"resumed at another seq":   `{"type":"resumed","sessionId":"s","epoch":"e","lastSeq":3}`,
		"resumed in another epoch": `{"type":"resumed","sessionId":"s","epoch":"other","lastSeq":4}`,
	} {
		require.Error(t, fresh().Apply(decode(t, frame)), name)
	}
	require.NoError(t, fresh().Apply(decode(t, `{"type":"resumed","sessionId":"s","epoch":"e","lastSeq":4}`)))

	// A message not under the last one held is on another branch: not shown, and its
	// deltas are ignored; branch.selected replaces the path.
	s = fresh()
	require.NoError(t, s.Apply(decode(t, `{"type":"assistant.segment.started","seq":5,"message":{"id":"x","position":2,"role":"assistant","content":"","status":"streaming","parentId":"elsewhere"}}`)))
	require.NoError(t, s.Apply(decode(t, `{"type":"chat.delta","seq":6,"messageId":"x","text":"a"}`)))
	require.Len(t, s.Sorted(), 1)
	require.NoError(t, s.Apply(decode(t, `{"type":"branch.selected","seq":7,"requestId":"","messages":[{"id":"m9","position":9,"role":"user","content":"other","status":"complete"}],"hasMore":true,"leafId":"m9"}`)))
	require.Equal(t, []string{"m9"}, []string{s.Sorted()[0].ID})
	require.Len(t, s.Sorted(), 1)
}

func TestDiff(t *testing.T) {
	a := []wstest.Message{{ID: "1", Position: 1, Content: "x", Tool: &wstest.Tool{Input: []byte(`{"b": 1, "a": 2}`)}}}
	b := []wstest.Message{{ID: "1", Position: 1, Content: "x", Tool: &wstest.Tool{Input: []byte(`{"a":2,"b":1}`)}}}
	require.Empty(t, wstest.Diff(a, b), "tool input compares as JSON values")
	b[0].Content = "y"
	require.NotEmpty(t, wstest.Diff(a, b))
	require.NotEmpty(t, wstest.Diff(a, nil))
}
