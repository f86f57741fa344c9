package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHistQuantiles(t *testing.T) {
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * 100 * time.Microsecond) // 0.1 ms .. 100 ms
	}
	assert.EqualValues(t, 1000, h.n)
	within := func(want, got time.Duration) {
		t.Helper()
		assert.InEpsilon(t, float64(want), float64(got), 0.03, "want %v got %v", want, got)
	}
	within(50*time.Millisecond, h.quantile(0.5))
	within(99*time.Millisecond, h.quantile(0.99))
	assert.Equal(t, 100*time.Millisecond, h.quantile(1))

	var small hist
	small.add(15 * time.Microsecond)
	assert.Equal(t, 15*time.Microsecond, small.quantile(0.5), "never above the largest value")

	var merged hist
	merged.merge(&h)
	merged.merge(&small)
	assert.EqualValues(t, 1001, merged.n)
	assert.Equal(t, 20*time.Microsecond, merged.quantile(0.0005))
}
