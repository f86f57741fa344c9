package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestStepStarts(t *testing.T) {
	assert.Equal(t, []int{0}, stepStarts(100, 0))
	assert.Equal(t, []int{0, 50, 100, 150}, stepStarts(200, 3))
	assert.Equal(t, []int{0, 3, 6}, stepStarts(10, 2)) // as the synthetic model splits 10 tokens in 3 steps
}

func TestCheckContinuation(t *testing.T) {
	const n, k = 500, 9 // steps start every 50 tokens
	snap := func(next, firstNew int) transcript { return transcript{next: next, firstNew: firstNew} }
	for _, tc := range []struct {
		name string
		c    continuation
		want continuationCheck
	}{
		{
			// Seen up to 137 live; the stored text ends with step 2 (…99); the new owner
			// streams 100… again and on to the end.
			name: "cut off mid-segment",
			c:    continuation{seenBefore: 138, snap: snap(100, -1), resumeIdx: 100, finalNext: n},
			want: continuationCheck{restreamed: 38},
		},
		{
			// The new owner had streamed 100…119 when the hello came: they are in the
			// snapshot's text, stamped after the kill.
			name: "taken up before the hello",
			c:    continuation{seenBefore: 138, snap: snap(120, 100), resumeIdx: 120, finalNext: n},
			want: continuationCheck{restreamed: 38},
		},
		{
			name: "cut off in the first segment: no stored text",
			c:    continuation{seenBefore: 20, snap: snap(0, -1), resumeIdx: 0, finalNext: n},
			want: continuationCheck{restreamed: 20},
		},
		{
			// A segment was stored before its last deltas reached the client.
			name: "snapshot ahead of the client",
			c:    continuation{seenBefore: 148, snap: snap(150, -1), resumeIdx: 150, finalNext: n},
			want: continuationCheck{snapOnly: 2},
		},
		{
			name: "continued off a boundary, and not after the snapshot's text",
			c:    continuation{seenBefore: 138, snap: snap(120, -1), resumeIdx: 100, finalNext: n},
			want: continuationCheck{restreamed: 18, offBoundary: true, wrongResume: true},
		},
		{
			name: "stored text repeats tokens",
			c:    continuation{seenBefore: 60, snap: transcript{next: 50, dups: 3, firstNew: -1}, resumeIdx: 50, finalNext: n},
			want: continuationCheck{restreamed: 10, badText: true},
		},
		{
			name: "the run did not end",
			c:    continuation{seenBefore: 60, snap: snap(50, -1), resumeIdx: 50, finalNext: 300},
			want: continuationCheck{restreamed: 10, incomplete: true},
		},
	} {
		assert.Equal(t, tc.want, checkContinuation(tc.c, n, k), tc.name)
	}
}

func TestCheckTranscript(t *testing.T) {
	at := func(i int, s int64) string { return fmt.Sprintf(" %d:%d", i, s) }
	// Two finished segments, then the successor's first tokens (stamped from 1000 on).
	texts := []string{at(0, 1) + at(1, 2), at(2, 3) + at(3, 4), at(4, 1000) + at(5, 1020)}
	assert.Equal(t, transcript{next: 6, firstNew: 4}, checkTranscript(texts, time.Unix(0, 1000)))
	assert.Equal(t, transcript{next: 0, firstNew: -1}, checkTranscript(nil, time.Unix(0, 1000)))
	// A cut-off segment stored with its text, then re-streamed from its start: 2 and 3
	// repeat; and one token missing.
	texts = []string{at(0, 1) + at(1, 2) + at(2, 3) + at(3, 4), at(2, 1000) + at(3, 1001) + at(5, 1002)}
	assert.Equal(t, transcript{next: 6, dups: 1, gaps: 1, firstNew: 2}, checkTranscript(texts, time.Unix(0, 1000)))
}

func TestImpliedFailover(t *testing.T) {
	// 1.7 s of a 2 s TTL waiting for the lease, 0.1 s taking over: with 10 s, 8.5 + 0.1.
	assert.Equal(t, 8600*time.Millisecond, impliedFailover(1700*time.Millisecond, 100*time.Millisecond, 2*time.Second, 10*time.Second))
	// A takeover before the recorded expiry (clock granularity) adds nothing.
	assert.Equal(t, 5*time.Second, impliedFailover(time.Second, -time.Millisecond, 2*time.Second, 10*time.Second))
}

func TestRelayedVia(t *testing.T) {
	m0 := metrics{`chatd_relayed_connections_total{via="hello"}`: 2, `chatd_relayed_connections_total{via="upgrade"}`: 0}
	m1 := metrics{`chatd_relayed_connections_total{via="hello"}`: 302, `chatd_relayed_connections_total{via="upgrade"}`: 0}
	assert.Equal(t, "relayed 300 via hello, 0 via upgrade", relayedVia(m0, m1))
	assert.Equal(t, "the node does not report chatd_relayed_connections_total", relayedVia(metrics{}, metrics{}))
}
