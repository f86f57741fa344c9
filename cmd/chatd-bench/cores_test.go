package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -cores takes positive core counts; the sweep's table puts each server beside the
// baseline of the same count.
func TestCoresSweep(t *testing.T) {
	got, err := parseCores(" 2,4, 16 ")
	require.NoError(t, err)
	assert.Equal(t, []int{2, 4, 16}, got)
	for _, bad := range []string{"2,zero", "0", "-4"} {
		_, err := parseCores(bad)
		assert.Error(t, err, bad)
	}

	r := &report{opts: options{sessions: 1000, tabs: 3, rate: 50, window: 8 * time.Second, warmup: 3 * time.Second}}
	row := func(cores int, target string, cpu time.Duration, tokens float64, p99 time.Duration) coresRow {
		return coresRow{cores: cores, fanRow: fanRow{target: target, cpuPerFrame: cpu, tokensPerFrame: tokens, p99: p99, bytesPerToken: 230}}
	}
	r.cores = []coresRow{
		row(2, "baseline", 10*time.Microsecond, 1, time.Millisecond),
		row(2, "chatd, adaptive", 12*time.Microsecond, 1, 2*time.Millisecond),
		row(16, "baseline", 8*time.Microsecond, 1, time.Millisecond),
		row(16, "chatd, adaptive", 16*time.Microsecond, 2, 3*time.Millisecond),
	}
	var b strings.Builder
	r.coresMarkdown(func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...) + "\n") })
	s := b.String()
	assert.Contains(t, s, "| 2 | chatd, adaptive | 0 | 1.00 | 0.00 ms | 2.00 ms | 12.0 µs | 1.20 | 2.00 | 230 B |")
	assert.Contains(t, s, "| 16 | chatd, adaptive | 0 | 2.00 | 0.00 ms | 3.00 ms | 8.0 µs | 1.00 | 3.00 | 230 B |", "each count against its own baseline")
	assert.Contains(t, s, "| 16 | baseline | 0 | 1.00 | 0.00 ms | 1.00 ms | 8.0 µs |  |  | 230 B |")
}
