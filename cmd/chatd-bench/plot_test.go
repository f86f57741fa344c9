package main

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAxisScale(t *testing.T) {
	lin := axisScale{lo: 0, hi: 10, p0: 100, p1: 200}
	assert.InDelta(t, 100, lin.pos(0), 1e-9)
	assert.InDelta(t, 150, lin.pos(5), 1e-9)
	assert.InDelta(t, 200, lin.pos(10), 1e-9)
	// A log axis puts each decade the same distance apart; a y axis runs upwards.
	lg := axisScale{lo: 1, hi: 1000, log: true, p0: 400, p1: 100}
	assert.InDelta(t, 400, lg.pos(1), 1e-9)
	assert.InDelta(t, 300, lg.pos(10), 1e-9)
	assert.InDelta(t, 200, lg.pos(100), 1e-9)
	assert.InDelta(t, 100, lg.pos(1000), 1e-9)
	assert.InDelta(t, 400-100*math.Log10(3), lg.pos(3), 1e-9)
}

func TestNiceStep(t *testing.T) {
	for _, tc := range []struct {
		span float64
		n    int
		want float64
	}{{10, 5, 2}, {23, 5, 5}, {100, 5, 20}, {0.7, 5, 0.2}, {9, 5, 2}, {6, 6, 1}, {0, 5, 1}} {
		assert.InDelta(t, tc.want, niceStep(tc.span, tc.n), 1e-12, "span %v", tc.span)
	}
}

func TestLinearRange(t *testing.T) {
	hi, ticks := linearRange(23, 5)
	assert.Equal(t, 25.0, hi)
	assert.Equal(t, []float64{0, 5, 10, 15, 20, 25}, ticks)
	hi, ticks = linearRange(20, 5) // a value on a tick ends the axis there
	assert.Equal(t, 20.0, hi)
	assert.Equal(t, []float64{0, 5, 10, 15, 20}, ticks)
	_, ticks = linearRange(0.9, 5)
	assert.Equal(t, []float64{0, 0.2, 0.4, 0.6, 0.8, 1}, ticks) // no 0.6000000000000001
	hi, _ = linearRange(math.NaN(), 5)
	assert.Equal(t, 1.0, hi)
}

func TestLogRangeAndTicks(t *testing.T) {
	for _, tc := range []struct{ min, max, lo, hi float64 }{
		{1.7, 1240, 1, 2000},
		{26, 1433, 20, 2000},
		{0.3, 0.7, 0.2, 1},
		{100, 100, 100, 200}, // one value: up to the next step
		{2, 5, 2, 5},         // values on steps are the ends
		{0, 5, 1, 10},        // nothing measured on a log axis
	} {
		lo, hi := logRange(tc.min, tc.max)
		assert.Equal(t, tc.lo, lo, "logRange(%v, %v)", tc.min, tc.max)
		assert.Equal(t, tc.hi, hi, "logRange(%v, %v)", tc.min, tc.max)
	}

	assert.Equal(t, []float64{1, 2, 5, 10, 20, 50, 100}, logTicks(1, 100))
	assert.Equal(t, []float64{0.1, 0.2, 0.5, 1, 2, 5, 10}, logTicks(0.1, 10))
	assert.Equal(t, []float64{1, 10, 100, 1000, 10000}, logTicks(1, 10000)) // over 3 decades
	assert.Equal(t, []float64{20, 50, 100, 200, 500, 1000, 2000}, logTicks(20, 2000))
}

func TestTickLabel(t *testing.T) {
	assert.Equal(t, "3000", tickLabel(3000))
	assert.Equal(t, "0.2", tickLabel(0.1+0.1))
	assert.Equal(t, "0.6", tickLabel(3*0.2))
	assert.Equal(t, "12.5", tickLabel(12.5))
}

func TestFontGlyphs(t *testing.T) {
	for r, g := range glyphs {
		for _, row := range g {
			require.Len(t, row, glyphW, "glyph %q", r)
			for _, c := range row {
				require.Contains(t, ".#", string(c), "glyph %q", r)
			}
		}
	}
	for r := rune(' '); r <= '~'; r++ {
		_, ok := glyphs[r]
		assert.True(t, ok, "no glyph for %q", r)
	}
	assert.Equal(t, missingGlyph, glyph('€'))
	assert.Equal(t, 3*(glyphW+1)*textScale, textWidth("µs×"))
}

func TestWritePlot(t *testing.T) {
	xs := []float64{100, 300, 1000, 3000}
	nan := math.NaN()
	panels := []plotPanel{
		{title: "CPU per token", xLabel: "sessions (S)", yLabel: "µs", xTicks: xs, series: []plotSeries{
			{name: "baseline", x: xs, y: []float64{7, 7.5, 7.6, 8}},
			{name: "chatd, coalesce off", x: xs, y: []float64{8, 8.2, 8.8, nan}},
			{name: "chatd, coalesce 25ms", x: xs, y: []float64{6, 6.5, 7, 7.5}},
			{name: "peer", x: xs, y: []float64{9, 9, 10, 12}},
		}},
		{title: "p99", xLabel: "sessions (S)", yLabel: "ms", logY: true, xTicks: xs, series: []plotSeries{
			{name: "baseline", x: xs, y: []float64{2, 5, 200, 2000}},
			{name: "chatd, coalesce off", x: xs, y: []float64{3, 8, 1200, 0}}, // 0: not measured
			{name: "chatd, coalesce 25ms", x: xs, y: []float64{26, 30, 80, 900}},
			{name: "peer", x: xs, y: []float64{4, 9, 300, 3000}},
		}},
	}
	path := filepath.Join(t.TempDir(), "scale.png")
	if p := os.Getenv("CHATD_BENCH_PLOT_SAMPLE"); p != "" {
		path = p // to look at it
	}
	require.NoError(t, writePlot(path, panels, 1280, 560))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err)
	assert.Equal(t, image.Rect(0, 0, 1280, 560), img.Bounds())
	// Every series is drawn in its colour.
	found := map[color.RGBA]int{}
	for y := 0; y < 560; y++ {
		for x := 0; x < 1280; x++ {
			r, g, b, a := img.At(x, y).RGBA()
			found[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}]++
		}
	}
	for i := range 4 {
		assert.Greater(t, found[seriesColors[i]], 200, "series %d's colour", i)
	}
}

// Names too long for one row wrap onto more.
func TestLegendRows(t *testing.T) {
	assert.Len(t, legendRows([]string{"a", "b"}, 1280), 1)
	assert.Equal(t, [][]string{{"a long series name here"}, {"another long series name"}, {"and a third one", "and a fourth"}},
		legendRows([]string{"a long series name here", "another long series name", "and a third one", "and a fourth"}, 600))
}
