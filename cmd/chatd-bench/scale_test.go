package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestScalePlotPath(t *testing.T) {
	assert.Equal(t, "docs/benchmarks-scale-quick.png", scalePlotPath("docs/benchmarks.md", "", false))
	assert.Equal(t, "docs/benchmarks-scale-full.png", scalePlotPath("docs/benchmarks.md", "", true))
	assert.Equal(t, "", scalePlotPath("", "", false)) // -out "": print only
	assert.Equal(t, "/tmp/s.png", scalePlotPath("", "/tmp/s.png", false))
	assert.Equal(t, "/tmp/s.png", scalePlotPath("docs/benchmarks.md", "/tmp/s.png", false))
}

func TestScaleFlags(t *testing.T) {
	o, err := parseFlags([]string{"-database-url", "postgres://x", "-scale", "100, 300"})
	require.NoError(t, err)
	assert.Equal(t, []int{100, 300}, o.scale.points)
	assert.Equal(t, 2*time.Second, o.scale.warmup)
	assert.Equal(t, 4*time.Second, o.scale.window)
	assert.True(t, o.scenarios["scale"] && o.scenarios["snapstorm"], "in the default set")

	o, err = parseFlags([]string{"-database-url", "postgres://x", "-full", "-scale-window", "7s"})
	require.NoError(t, err)
	assert.Equal(t, []int{100, 300, 1000, 3000}, o.scale.points)
	assert.Equal(t, 5*time.Second, o.scale.warmup)
	assert.Equal(t, 7*time.Second, o.scale.window)

	_, err = parseFlags([]string{"-database-url", "postgres://x", "-scale", "100,x"})
	assert.ErrorContains(t, err, "-scale")
}

func scaleFixture() *scaleResult {
	r := &scaleResult{tabs: 3, rate: 50, warmup: 2 * time.Second, window: 4 * time.Second,
		points: []int{100, 300}, servers: []string{"baseline", "chatd, coalesce off", "chatd, coalesce 25ms", peerName}}
	add := func(s int, name string, cpuPerFrame, p99 time.Duration, tokensPerFrame float64) {
		r.rows = append(r.rows, scaleRow{sessions: s, fanRow: fanRow{target: name, cpuPerFrame: cpuPerFrame, p99: p99,
			tokensPerFrame: tokensPerFrame, latencySamples: 1000, writesPerFrame: 1}})
	}
	add(100, "baseline", 10*time.Microsecond, 20*time.Millisecond, 1)
	add(100, "chatd, coalesce off", 12*time.Microsecond, 30*time.Millisecond, 1)
	add(100, "chatd, coalesce 25ms", 18*time.Microsecond, 50*time.Millisecond, 2) // 9 µs per token
	add(100, peerName, 6*time.Microsecond, 60*time.Millisecond, 1)
	add(300, "baseline", 8*time.Microsecond, 200*time.Millisecond, 1)
	r.rows = append(r.rows, scaleRow{sessions: 300, fanRow: fanRow{target: "chatd, coalesce off"}, failed: "dial: refused\nby the server"})
	add(300, "chatd, coalesce 25ms", 16*time.Microsecond, 100*time.Millisecond, 2)
	r.rows = append(r.rows, scaleRow{sessions: 300, fanRow: fanRow{target: peerName}, failed: "centrifuge failed during the point"})
	return r
}

// Ratios are per token, against the baseline and the peer at the same S (none against a
// point that failed); a point that failed says why.
func TestScaleMarkdown(t *testing.T) {
	r := scaleFixture()
	r.plot = "docs/benchmarks-scale-quick.png"
	var b strings.Builder
	r.markdown(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }, "docs/benchmarks.md")
	s := b.String()
	assert.Contains(t, s, "| 100 | chatd, coalesce off | 0 | 1.00 | 0.00 ms | 30.00 ms | 12.0 µs | 1.20 | 1.50 | 2.00 | 0.50 | 1.00 |")
	assert.Contains(t, s, "| 100 | chatd, coalesce 25ms | 0 | 2.00 | 0.00 ms | 50.00 ms | 9.0 µs | 0.90 | 2.50 | 1.50 | 0.83 | 1.00 |")
	assert.Contains(t, s, "| 100 | "+peerName+" | 0 | 1.00 | 0.00 ms | 60.00 ms | 6.0 µs | 0.60 | 3.00 |  |  | 1.00 |")
	assert.Contains(t, s, "| 300 | chatd, coalesce 25ms | 0 | 2.00 | 0.00 ms | 100.00 ms | 8.0 µs | 1.00 | 0.50 |  |  | 1.00 |")
	assert.Contains(t, s, "| 300 | "+peerName+" | not measured |")
	assert.Contains(t, s, "| 300 | chatd, coalesce off | not measured |")
	assert.Contains(t, s, "- S=300, chatd, coalesce off: not measured: `dial: refused by the server`")
	assert.Contains(t, s, "](benchmarks-scale-quick.png)") // relative to the results file
	header := strings.Count(strings.Split(s, "\n")[2], "|")
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "| 100 ") || strings.HasPrefix(line, "| 300 ") {
			assert.Equal(t, header, strings.Count(line, "|"), "columns of %q", line)
		}
	}
}

// One line per server in both panels, a gap where a point was not measured.
func TestScalePanels(t *testing.T) {
	p := scaleFixture().panels()
	require.Len(t, p, 2)
	assert.False(t, p[0].logY)
	assert.True(t, p[1].logY)
	assert.Equal(t, []float64{100, 300}, p[0].xTicks)
	require.Len(t, p[0].series, 4)
	assert.Equal(t, peerName, p[0].series[3].name)
	assert.Equal(t, 6.0, p[0].series[3].y[0])
	assert.True(t, math.IsNaN(p[0].series[3].y[1]))
	assert.Equal(t, "chatd, coalesce 25ms", p[0].series[2].name)
	assert.Equal(t, []float64{9, 8}, p[0].series[2].y)
	assert.Equal(t, []float64{50, 100}, p[1].series[2].y)
	assert.Equal(t, 30.0, p[1].series[1].y[0])
	assert.True(t, math.IsNaN(p[1].series[1].y[1]))
}

// The peer is the curve's fourth line when -peer names it, opened in its own protocol
// (openFor); without -peer the curve has the other three.
func TestScaleServersPeer(t *testing.T) {
	names := func(ss []scaleServer) (n []string) {
		for _, s := range ss {
			n = append(n, s.name)
		}
		return n
	}
	without := (&bench{opts: options{}}).scaleServers()
	assert.Equal(t, []string{"baseline", "chatd, coalesce off", "chatd, adaptive", "chatd, coalesce 25ms"}, names(without))
	with := (&bench{opts: options{peer: "bin/chatd-peer"}}).scaleServers()
	require.Equal(t, []string{"baseline", "chatd, coalesce off", "chatd, adaptive", "chatd, coalesce 25ms", peerName}, names(with))
	assert.NotNil(t, with[4].open)
	assert.Nil(t, with[4].stop, "stopped with SIGTERM, like chatd")
}
