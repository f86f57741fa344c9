package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A push as the peer writes it (Centrifuge v0.40, JSON protocol); the first publication of
// a new stream also carries the stream's epoch after its offset.
func cfPush(offset int64, data string) string {
	return fmt.Sprintf(`{"push":{"channel":"chat:s","pub":{"data":%s,"offset":%d}}}`, data, offset)
}

func cfDelta(seq int64, tok int, stamp time.Time) string {
	return fmt.Sprintf(`{"type":"chat.delta","seq":%d,"runId":"r","requestId":"q","messageId":"m","text":" %d:%d"}`, seq, tok, stamp.UnixNano())
}

func newCfTab() *tab {
	return &tab{g: &gen{}, sess: &session{id: "s"}, cf: &cfState{channel: peerChannel("s")}, nextTok: -1, ready: make(chan struct{})}
}

func TestCfParsePush(t *testing.T) {
	data, offset, ok := cfParsePush([]byte(`{"push":{"channel":"chat:a","pub":{"data":{"type":"chat.delta","seq":1,"text":" 0:17"},"offset":1,"epoch":"WqJcItSq"}}}`))
	require.True(t, ok)
	assert.Equal(t, `{"type":"chat.delta","seq":1,"text":" 0:17"}`, string(data))
	assert.EqualValues(t, 1, offset)

	data, offset, ok = cfParsePush([]byte(cfPush(123456, `{"type":"chat.done","seq":7}`)))
	require.True(t, ok)
	assert.Equal(t, `{"type":"chat.done","seq":7}`, string(data))
	assert.EqualValues(t, 123456, offset)

	_, _, ok = cfParsePush([]byte(`{"push":{"channel":"chat:a","unsubscribe":{"code":2000}}}`))
	assert.False(t, ok)
}

// The peer puts several publications in one frame, one per line: each is applied, in
// order, and the frame's tokens are all timed.
func TestCfFrameWithSeveralPushes(t *testing.T) {
	tb := newCfTab()
	tb.g.measuring.Store(true)
	now := time.Now()
	frame := strings.Join([]string{
		cfPush(1, cfDelta(1, 0, now.Add(-3*time.Millisecond))),
		cfPush(2, cfDelta(2, 1, now.Add(-2*time.Millisecond))),
		cfPush(3, cfDelta(3, 2, now.Add(-1*time.Millisecond))),
		cfPush(4, `{"type":"chat.done","seq":4,"runId":"r","requestId":"q"}`),
	}, "\n")
	tb.cfFrame([]byte(frame), now)
	assert.EqualValues(t, 4, tb.lastSeq)
	assert.Equal(t, 3, tb.nextTok)
	assert.Zero(t, tb.gaps.Load())
	assert.Zero(t, tb.dups.Load())
	assert.EqualValues(t, 1, tb.runsDone.Load())
	assert.EqualValues(t, 3, tb.lat.n)
	assert.Nil(t, tb.g.firstErr.Load())
}

// Offsets are checked like chatd's seq: one that skips ahead is a gap, one that repeats a
// duplicate (and so is its token).
func TestCfOffsetGapsAndDups(t *testing.T) {
	tb := newCfTab()
	now := time.Now()
	tb.cfFrame([]byte(cfPush(1, cfDelta(1, 0, now))), now)
	tb.cfFrame([]byte(cfPush(2, cfDelta(2, 1, now))), now)
	tb.cfFrame([]byte(cfPush(4, cfDelta(4, 2, now))), now) // offset 3 lost, token 2 follows on
	assert.EqualValues(t, 1, tb.gaps.Load())
	assert.Zero(t, tb.dups.Load())
	tb.cfFrame([]byte(cfPush(4, cfDelta(4, 2, now))), now) // repeated
	assert.EqualValues(t, 2, tb.dups.Load(), "the offset and the token")
	tb.cfFrame([]byte(cfPush(5, cfDelta(5, 5, now))), now) // tokens 3 and 4 lost
	assert.EqualValues(t, 2, tb.gaps.Load())
	assert.EqualValues(t, 5, tb.lastSeq)
}

// A resubscribe that recovers applies the missed publications from the reply, then the
// live ones follow on.
func TestCfSubscribeRecovered(t *testing.T) {
	tb := newCfTab()
	tb.lastSeq, tb.epoch, tb.nextTok = 5, "E", 5
	now := time.Now()
	pubs := []map[string]any{
		{"data": json.RawMessage(cfDelta(6, 5, now)), "offset": 6},
		{"data": json.RawMessage(cfDelta(7, 6, now)), "offset": 7},
	}
	reply, _ := json.Marshal(map[string]any{"id": 2, "subscribe": map[string]any{
		"recoverable": true, "epoch": "E", "offset": 5, "positioned": true, "was_recovering": true, "recovered": true, "publications": pubs,
	}})
	tb.cfFrame(append(append(reply, '\n'), cfPush(8, cfDelta(8, 7, now))...), now)
	assert.EqualValues(t, 1, tb.replays.Load())
	assert.Zero(t, tb.snapshots.Load())
	assert.EqualValues(t, 8, tb.lastSeq)
	assert.Equal(t, 8, tb.nextTok)
	assert.Zero(t, tb.gaps.Load())
	assert.Zero(t, tb.dups.Load())
	assert.Nil(t, tb.g.firstErr.Load())
	select {
	case <-tb.ready:
	default:
		t.Fatal("the subscribe reply did not make the tab ready")
	}
}

// A resubscribe the peer cannot recover (another epoch) starts at the stream's top, like a
// chatd snapshot: counted as such, not as gaps.
func TestCfSubscribeNotRecovered(t *testing.T) {
	tb := newCfTab()
	tb.lastSeq, tb.epoch, tb.nextTok = 5, "E", 5
	now := time.Now()
	tb.cfFrame([]byte(`{"id":2,"subscribe":{"recoverable":true,"epoch":"F","offset":40,"positioned":true,"was_recovering":true}}`), now)
	assert.EqualValues(t, 1, tb.snapshots.Load())
	assert.Zero(t, tb.replays.Load())
	assert.Equal(t, "F", tb.epoch)
	tb.cfFrame([]byte(cfPush(41, cfDelta(41, 40, now))), now)
	assert.Zero(t, tb.gaps.Load())
	assert.Zero(t, tb.dups.Load())
}

func TestCfErrorReply(t *testing.T) {
	tb := newCfTab()
	tb.cfFrame([]byte(`{"id":3,"error":{"code":108,"message":"not available"}}`), time.Now())
	assert.EqualValues(t, 1, tb.errors.Load())
	require.NotNil(t, tb.g.firstErr.Load())
	assert.Contains(t, *tb.g.firstErr.Load(), "not available")
}

func TestCfConnectFrame(t *testing.T) {
	lines := strings.Split(string(cfConnectFrame("chat:x", false, 0, "")), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, `{"id":1,"connect":{}}`, lines[0])
	assert.JSONEq(t, `{"id":2,"subscribe":{"channel":"chat:x"}}`, lines[1])
	lines = strings.Split(string(cfConnectFrame("chat:x", true, 42, "abc")), "\n")
	require.Len(t, lines, 2)
	assert.JSONEq(t, `{"id":2,"subscribe":{"channel":"chat:x","recover":true,"offset":42,"epoch":"abc"}}`, lines[1])
}

// chatd's rows are compared with the peer's as with the baseline's, per token.
func TestReportPeerRatios(t *testing.T) {
	r := &report{opts: options{sessions: 1, tabs: 1, rate: 1}, fanout: []fanRow{
		{target: "baseline", tokensPerFrame: 1, cpuPerFrame: 10 * time.Microsecond, p99: 10 * time.Millisecond},
		{target: peerName, tokensPerFrame: 2, cpuPerFrame: 40 * time.Microsecond, p99: 20 * time.Millisecond},
		{target: "chatd", tokensPerFrame: 1, cpuPerFrame: 30 * time.Microsecond, p99: 40 * time.Millisecond},
	}, peerIdle: &idleResult{target: peerName, conns: 10}}
	md := r.markdown()
	assert.Contains(t, md, "| "+peerName+" | 0 | 2.00 | 0.00 ms | 20.00 ms | 0.00 ms | 40.0 µs | 2.00 | 2.00 |  |  |")
	assert.Contains(t, md, "| chatd | 0 | 1.00 | 0.00 ms | 40.00 ms | 0.00 ms | 30.0 µs | 3.00 | 4.00 | 1.50 | 2.00 |")
	assert.Contains(t, md, "| "+peerName+" | 0.0 KiB |")
}

// The snapshot storm alone runs the fan-out's chatd, not the peer, which has no part in it.
func TestPeerFanoutSkippedForSnapstormAlone(t *testing.T) {
	b := &bench{opts: options{peer: "/nonexistent/chatd-peer", scenarios: map[string]bool{"snapstorm": true}}, report: &report{}}
	require.NoError(t, b.peerFanout(t.Context(), func(time.Duration) string { return "" }))
	assert.Empty(t, b.report.fanout)
}
