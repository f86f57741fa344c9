package conversation_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/chatd/chatd/agent/script"
	"github.com/chatd/chatd/conversation"
	"github.com/chatd/chatd/store/storetest"
)

// frameSub records what it is delivered as encoded frames, and the events' addresses.
type frameSub struct {
	f      *conversation.Format
	mu     sync.Mutex
	frames []string
	deltas []*conversation.Event
	ended  chan struct{}
}

func newFrameSub() *frameSub {
	return &frameSub{
		f:     conversation.NewFormat("test", func(e *conversation.Event) []byte { return fmt.Appendf(nil, "%d %s %s", e.Seq, e.Type, e.Text) }),
		ended: make(chan struct{}),
	}
}

func (s *frameSub) CatchUp(conversation.CatchUp) bool   { return true }
func (s *frameSub) Dropped(conversation.DropReason)     {}
func (s *frameSub) Deliver(ev *conversation.Event) bool { return s.take(ev) }

func (s *frameSub) take(ev *conversation.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frames = append(s.frames, string(ev.Encode(s.f)))
	if ev.Type == conversation.EventDelta {
		s.deltas = append(s.deltas, ev)
	}
	if ev.Terminal() {
		close(s.ended)
	}
	return true
}

// transientSub is a frameSub that says it keeps no events (as transport.Outbox does),
// and holds no encodings.
type transientSub struct{ *frameSub }

func (transientSub) HoldsEncodings() bool { return false }

// appendSub is a transient subscriber of a format that appends to a buffer. It keeps
// the frames it is given as they are (not copies), and says it holds them when holds is
// set, as an outbox with frames queued does.
type appendSub struct {
	*frameSub
	holds bool
	raw   [][]byte
}

// appendFormat is the appendSubs' format: one, so that their frames are shared.
var appendFormat = conversation.NewAppendFormat("test-append", func(dst []byte, e *conversation.Event) []byte {
	return fmt.Appendf(dst, "%d %s %s", e.Seq, e.Type, e.Text)
})

func newAppendSub(holds bool) *appendSub {
	s := newFrameSub()
	s.f = appendFormat
	return &appendSub{frameSub: s, holds: holds}
}

func (s *appendSub) Deliver(ev *conversation.Event) bool {
	b := ev.Encode(s.f)
	s.mu.Lock()
	s.raw = append(s.raw, b)
	s.mu.Unlock()
	return s.take(ev)
}

func (s *appendSub) HoldsEncodings() bool { return s.holds }

// buffers counts the distinct buffers of the frames s was given.
func (s *appendSub) buffers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[*byte]bool{}
	for _, b := range s.raw {
		seen[unsafe.SliceData(b)] = true
	}
	return len(seen)
}

// runAndRecord streams a run of many deltas to subs and returns the text the first one's
// frames carry, checking their seqs follow each other.
func runAndRecord(t *testing.T, subs ...conversation.Subscriber) (text string, first *frameSub) {
	t.Helper()
	var pieces []string
	for i := range 200 {
		pieces = append(pieces, fmt.Sprintf("<%d>", i))
	}
	agent := script.New(script.Text(pieces[:100]...), script.Tool("c1", "t", `{}`, "out"), script.Text(pieces[100:]...))
	a := startActorWithClock(t, storetest.New(t), agent, clockwork.NewFakeClock())
	ctx := testCtx(t)
	for i, s := range subs {
		_, err := a.Hello(ctx, conversation.HelloRequest{Create: i == 0, Subscriber: s})
		require.NoError(t, err)
	}
	_, err := a.Send(ctx, conversation.SendRequest{RequestID: "r1", Content: "go"})
	require.NoError(t, err)
	first = subs[0].(interface{ rec() *frameSub }).rec()
	<-first.ended
	var b strings.Builder
	first.mu.Lock()
	defer first.mu.Unlock()
	var seq int64
	for i, f := range first.frames {
		var typ, rest string
		_, err := fmt.Sscanf(f, "%d %s", &seq, &typ)
		require.NoError(t, err, f)
		if i > 0 {
			var prev int64
			_, _ = fmt.Sscanf(first.frames[i-1], "%d", &prev)
			require.Equal(t, prev+1, seq, "frame %d", i)
		}
		if typ == string(conversation.EventDelta) {
			rest = f[len(fmt.Sprint(seq))+len(typ)+2:]
			b.WriteString(rest)
		}
	}
	return b.String(), first
}

func (s *frameSub) rec() *frameSub { return s }

// With only transient subscribers, a delta's event is reused for the next; every frame
// is still the event it was encoded from.
func TestDeltaEventsAreReusedWhenNoSubscriberKeepsThem(t *testing.T) {
	t.Parallel()
	s := transientSub{newFrameSub()}
	text, rec := runAndRecord(t, s)
	var want strings.Builder
	for i := range 200 {
		fmt.Fprintf(&want, "<%d>", i)
	}
	require.Equal(t, want.String(), text)
	distinct := map[*conversation.Event]bool{}
	for _, e := range rec.deltas {
		distinct[e] = true
	}
	require.Greater(t, len(rec.deltas), 10)
	require.LessOrEqual(t, len(distinct), 3, "one event for a run of deltas, a new one after an event the ring keeps")
}

// A subscriber that may keep events gets every event in memory of its own.
func TestDeltaEventsAreNotReusedWhileASubscriberMayKeepThem(t *testing.T) {
	t.Parallel()
	transient, keeper := transientSub{newFrameSub()}, newFrameSub()
	text, rec := runAndRecord(t, transient, keeper)
	require.Contains(t, text, "<199>")
	distinct := map[*conversation.Event]bool{}
	for _, e := range rec.deltas {
		distinct[e] = true
	}
	require.Len(t, distinct, len(rec.deltas))
	keeper.mu.Lock()
	defer keeper.mu.Unlock()
	require.Equal(t, rec.frames, keeper.frames)
	for i, e := range keeper.deltas {
		require.Equal(t, string(e.Encode(keeper.f)), keeper.frames[indexOfDelta(keeper.frames, i)], "kept event %d is unchanged", i)
	}
}

// indexOfDelta returns the index in frames of the i-th chat.delta frame.
func indexOfDelta(frames []string, i int) int {
	for j, f := range frames {
		if strings.Contains(f, " "+string(conversation.EventDelta)+" ") {
			if i == 0 {
				return j
			}
			i--
		}
	}
	return -1
}

// When no subscriber holds a delta's encoding once it was delivered, the next delta is
// encoded into the same buffer; every frame was still the event it was encoded from
// when it was delivered (the recorded copies spell the whole answer).
func TestDeltaEncodingsAreReusedWhenNoSubscriberHoldsThem(t *testing.T) {
	t.Parallel()
	s := newAppendSub(false)
	text, _ := runAndRecord(t, s)
	require.Contains(t, text, "<0><1><2>")
	require.Contains(t, text, "<197><198><199>")
	require.Less(t, s.buffers(), len(s.raw)/4, "most frames share their buffer with the one before")
}

// A subscriber that holds encodings (frames queued, not yet written) keeps them as they
// were encoded: no later event's encoding is written into them, whichever other
// subscribers there are.
func TestDeltaEncodingsAreNotReusedWhileASubscriberHoldsThem(t *testing.T) {
	t.Parallel()
	for _, subs := range [][]*appendSub{{newAppendSub(true)}, {newAppendSub(false), newAppendSub(true)}} {
		list := make([]conversation.Subscriber, len(subs))
		for i, s := range subs {
			list[i] = s
		}
		runAndRecord(t, list...)
		for _, s := range subs {
			s.mu.Lock()
			require.Len(t, s.raw, len(s.frames))
			for i, b := range s.raw {
				require.Equal(t, s.frames[i], string(b), "frame %d as it was delivered", i)
			}
			s.mu.Unlock()
			require.Equal(t, len(s.raw), s.buffers(), "a buffer of its own for every frame")
		}
	}
}
