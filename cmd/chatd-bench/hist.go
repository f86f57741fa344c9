package main

import (
	"math"
	"time"
)

// hist is a latency histogram: 10 µs buckets below 1 ms, then buckets 2% wide up to
// about a minute. It is not safe for concurrent use; each connection keeps its own and
// they are merged.
type hist struct {
	counts [histBuckets]uint32
	n      int64
	max    time.Duration
}

const (
	linearBuckets = 100 // 0-1 ms in 10 µs steps
	logBase       = 1.02
	histBuckets   = linearBuckets + 560
)

var logStep = math.Log(logBase)

func bucketOf(d time.Duration) int {
	us := d.Microseconds()
	if us < 0 {
		us = 0
	}
	if us < 1000 {
		return int(us / 10)
	}
	i := linearBuckets + int(math.Log(float64(us)/1000)/logStep)
	return min(i, histBuckets-1)
}

// upper is the largest value bucket i holds, which is what a percentile reports.
func upper(i int) time.Duration {
	if i < linearBuckets {
		return time.Duration(i+1) * 10 * time.Microsecond
	}
	return time.Duration(1000*math.Pow(logBase, float64(i-linearBuckets+1))) * time.Microsecond
}

func (h *hist) add(d time.Duration) {
	h.counts[bucketOf(d)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q ≤ 1), rounded up to its bucket's bound and never
// above the largest value seen.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if seen >= rank {
			return min(upper(i), h.max)
		}
	}
	return h.max
}
