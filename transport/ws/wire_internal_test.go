package ws

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/conversation"
)

// marshalled is what the general encoder writes for a text event.
func marshalled(t testing.TB, ev conversation.Event) []byte {
	text, id, runID := ev.Text, ev.MessageID, ev.RunID
	b, err := json.Marshal(wireEvent{Type: string(ev.Type), Seq: ev.Seq, RunID: &runID, RequestID: ev.RequestID, MessageID: &id, Text: &text})
	require.NoError(t, err)
	return b
}

var textCases = []string{
	"", "hello", " 41:1763712000123456789", "déjà vu 🙂", "tab\tnew\nline\r", "quote \" back \\ slash",
	"<b>&amp;</b>", "\x00\x01\x1f\x7f", "bad \xff utf8", "line\u2028sep\u2029", "\u00e9\u4e2d",
}

// The hand-written encoding of deltas and tool output is byte for byte what json.Marshal
// gives, so clients cannot tell which path a frame took.
func TestTextEventsEncodeLikeMarshal(t *testing.T) {
	for _, typ := range []conversation.EventType{conversation.EventDelta, conversation.EventToolOutput} {
		for i, text := range textCases {
			ev := conversation.Event{Type: typ, Seq: int64(i * 1000003), RunID: uuid.New(), RequestID: textCases[len(textCases)-1-i], MessageID: uuid.New(), Text: text}
			got := EncodeEvent(&ev)
			require.Equal(t, string(marshalled(t, ev)), string(got), "%q", text)
		}
	}
}

func FuzzTextEventEncoding(f *testing.F) {
	for _, s := range textCases {
		f.Add(s, "r1", int64(7))
	}
	f.Fuzz(func(t *testing.T, text, requestID string, seq int64) {
		ev := conversation.Event{Type: conversation.EventDelta, Seq: seq, RunID: uuid.New(), RequestID: requestID, MessageID: uuid.New(), Text: text}
		got := EncodeEvent(&ev)
		require.Equal(t, string(marshalled(t, ev)), string(got))
	})
}

func BenchmarkEncodeDelta(b *testing.B) {
	ev := conversation.Event{Type: conversation.EventDelta, Seq: 1234, RunID: uuid.New(), RequestID: "3418a7ef-98d4-44ed-9b6f-8a682b65e1e3", MessageID: uuid.New(), Text: " 41:1763712000123456789"}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = EncodeEvent(&ev)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = marshalled(b, ev)
		}
	})
}
