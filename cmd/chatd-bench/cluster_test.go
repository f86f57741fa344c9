package main

import (
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
	for _, tc := range []struct {
		name string
		c    continuation
		want continuationCheck
	}{
		{
			// Seen up to 137 live; the stored text ends with step 2 (…99); the new owner
			// streams 100… again and on to the end.
			name: "cut off mid-segment",
			c:    continuation{seenBefore: 138, snapNext: 100, resumeIdx: 100, finalNext: n},
			want: continuationCheck{restreamed: 38},
		},
		{
			name: "cut off in the first segment: no stored text",
			c:    continuation{seenBefore: 20, snapNext: -1, resumeIdx: 0, finalNext: n},
			want: continuationCheck{restreamed: 20},
		},
		{
			// A segment was stored before its last deltas reached the client.
			name: "snapshot ahead of the client",
			c:    continuation{seenBefore: 148, snapNext: 150, resumeIdx: 150, finalNext: n},
			want: continuationCheck{snapOnly: 2},
		},
		{
			name: "stored text ends off a boundary, and the run goes on from elsewhere",
			c:    continuation{seenBefore: 138, snapNext: 120, resumeIdx: 100, finalNext: n},
			want: continuationCheck{restreamed: 18, offBoundary: true, wrongResume: true},
		},
		{
			name: "the run did not end",
			c:    continuation{seenBefore: 60, snapNext: 50, resumeIdx: 50, finalNext: 300},
			want: continuationCheck{restreamed: 10, incomplete: true},
		},
	} {
		assert.Equal(t, tc.want, checkContinuation(tc.c, n, k), tc.name)
	}
}

func TestImpliedFailover(t *testing.T) {
	// 1.7 s of a 2 s TTL waiting for the lease, 0.1 s taking over: with 10 s, 8.5 + 0.1.
	assert.Equal(t, 8600*time.Millisecond, impliedFailover(1700*time.Millisecond, 100*time.Millisecond, 2*time.Second, 10*time.Second))
	// A takeover before the recorded expiry (clock granularity) adds nothing.
	assert.Equal(t, 5*time.Second, impliedFailover(time.Second, -time.Millisecond, 2*time.Second, 10*time.Second))
}
