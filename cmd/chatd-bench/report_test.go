package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMakeFlags(t *testing.T) {
	assert.Equal(t, "", makeFlags("chatd-bench -chatd bin/chatd"))
	assert.Equal(t, " BENCH_FLAGS='-full'", makeFlags("chatd-bench -chatd bin/chatd -full"))
	assert.Equal(t, " BENCH_FLAGS='-full'", makeFlags("chatd-bench -chatd bin/chatd -peer bin/chatd-peer -full"))
	assert.Equal(t, " BENCH_FLAGS='-peer bin/other'", makeFlags("chatd-bench -chatd bin/chatd -peer bin/other"))
	assert.Equal(t, " BENCH_FLAGS='-chatd bin/chatd-before -out x.md'", makeFlags("chatd-bench -chatd bin/chatd-before -out x.md"))
}

// Results replace their own mode's block and keep everything else.
func TestReportWriteKeepsTheRest(t *testing.T) {
	path := t.TempDir() + "/b.md"
	assert.NoError(t, os.WriteFile(path, []byte("# Benchmarks\n\nhand-written\n"), 0o644))
	assert.NoError(t, write(path, "quick", "quick 1"))
	assert.NoError(t, write(path, "full", "full 1"))
	assert.NoError(t, write(path, "quick cluster", "cluster 1"))
	assert.NoError(t, write(path, "quick", "quick 2"))
	assert.NoError(t, write(path, "quick cluster", "cluster 2"))
	b, err := os.ReadFile(path)
	assert.NoError(t, err)
	s := string(b)
	assert.Contains(t, s, "hand-written")
	assert.Contains(t, s, "quick 2")
	assert.Contains(t, s, "full 1")
	assert.NotContains(t, s, "quick 1")
	assert.Contains(t, s, "cluster 2")
	assert.NotContains(t, s, "cluster 1")
	assert.Equal(t, 1, strings.Count(s, "quick results: begin"))
	assert.Equal(t, 1, strings.Count(s, "quick cluster results: begin"))
}

// A run of the cluster scenario alone writes only the cluster's block, and a run
// without it leaves that block alone.
func TestReportBlocks(t *testing.T) {
	names := func(r *report) []string {
		var n []string
		for _, b := range r.blocks() {
			n = append(n, b.name)
		}
		return n
	}
	assert.Equal(t, []string{"quick cluster"}, names(&report{cluster: &clusterResult{}}))
	assert.Equal(t, []string{"full"}, names(&report{opts: options{full: true}, idle: &idleResult{}}))
	assert.Equal(t, []string{"quick", "quick cluster"}, names(&report{storage: []storageRow{{}}, cluster: &clusterResult{}}))
	assert.Empty(t, names(&report{}))
}

func TestLastToken(t *testing.T) {
	n, ok := lastToken(" 0:100 1:200 12:300 ")
	assert.True(t, ok)
	assert.Equal(t, 12, n)
	_, ok = lastToken("")
	assert.False(t, ok)
	_, ok = lastToken("no tokens here")
	assert.False(t, ok)
}

// Every fan-out row has the header's columns, both ratios (to the baseline and to the
// peer) come before the write syscalls per frame, which are shown for every server, the
// peer too ("n/a" when /proc/<pid>/io could not be read).
func TestFanoutTableColumns(t *testing.T) {
	r := &report{opts: options{sessions: 10, tabs: 3, rate: 50}, fanout: []fanRow{
		{target: "baseline", cpuPerFrame: 7000, tokensPerFrame: 1, p99: 1e6, writesPerFrame: 1},
		{target: peerName, cpuPerFrame: 7000, tokensPerFrame: 1, p99: 1e6, writesPerFrame: 0.9},
		{target: "chatd", cpuPerFrame: 8000, tokensPerFrame: 1, p99: 2e6, writesPerFrame: 0.42},
		{target: "chatd, coalesce 25ms", cpuPerFrame: 14000, tokensPerFrame: 2, p99: 1e6, writesPerFrame: -1},
	}}
	var header int
	rows := 0
	for _, line := range strings.Split(r.markdown(), "\n") {
		switch {
		case strings.HasPrefix(line, "| server |"):
			header = strings.Count(line, "|")
			assert.Contains(t, line, "| write syscalls/frame |")
		case strings.HasPrefix(line, "| baseline |"), strings.HasPrefix(line, "| "+peerName+" |"), strings.HasPrefix(line, "| chatd"):
			rows++
			assert.Equal(t, header, strings.Count(line, "|"), line)
		}
	}
	assert.Equal(t, 4, rows)
	s := r.markdown()
	assert.Contains(t, s, "| 7.0 µs | 1.00 | 1.00 |  |  | 0.90 |") // the peer
	assert.Contains(t, s, "| 1.14 | 2.00 | 1.14 | 2.00 | 0.42 |")
	assert.Contains(t, s, "| 1.00 | 1.00 | 1.00 | 1.00 | n/a |")
}
