package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"
)

// A line chart in PNG, drawn with the standard library alone (image, image/draw,
// image/png and the bitmap font in font.go): the scale curve's panels side by side, one
// line per server, a shared legend below. The x axis is logarithmic; a panel's y axis is
// linear from 0 or logarithmic.

// plotSeries is one line: y[i] is the value at x[i]; NaN (or, on a log axis, a value
// that is not positive) is a point not measured, which breaks the line.
type plotSeries struct {
	name string
	x, y []float64
}

type plotPanel struct {
	title, xLabel, yLabel string
	logY                  bool
	xTicks                []float64 // the measured x values, labelled as they are
	series                []plotSeries
}

// axisScale maps values in [lo, hi] to pixels p0..p1, linearly or by log10.
type axisScale struct {
	lo, hi float64
	log    bool
	p0, p1 float64
}

func (a axisScale) pos(v float64) float64 {
	f := (v - a.lo) / (a.hi - a.lo)
	if a.log {
		f = math.Log10(v/a.lo) / math.Log10(a.hi/a.lo)
	}
	return a.p0 + f*(a.p1-a.p0)
}

// niceStep is the 1, 2 or 5 × 10^k step that cuts span into about n parts.
func niceStep(span float64, n int) float64 {
	raw := span / float64(max(n, 1))
	if raw <= 0 || math.IsNaN(raw) || math.IsInf(raw, 0) {
		return 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	switch norm := raw / mag; {
	case norm <= 1:
		return mag
	case norm <= 2:
		return 2 * mag
	case norm <= 5:
		return 5 * mag
	default:
		return 10 * mag
	}
}

// linearRange is the y axis of a linear panel: from 0 to the first tick at or above the
// largest value, ticks about n apart.
func linearRange(maxV float64, n int) (hi float64, ticks []float64) {
	if !(maxV > 0) || math.IsInf(maxV, 0) {
		maxV = 1
	}
	step := niceStep(maxV, n)
	k := int(math.Ceil(maxV/step - 1e-9))
	for i := 0; i <= k; i++ {
		ticks = append(ticks, roundSig(float64(i)*step))
	}
	return ticks[len(ticks)-1], ticks
}

// logRange is a log axis from the largest 1, 2 or 5 × 10^k at or below the smallest
// value to the smallest one at or above the largest.
func logRange(minV, maxV float64) (lo, hi float64) {
	if !(minV > 0) || !(maxV > 0) || math.IsInf(maxV, 0) {
		return 1, 10
	}
	steps := func(v float64) (below, above float64) {
		e := math.Pow(10, math.Floor(math.Log10(v)+1e-9))
		below, above = e, 10*e
		for _, m := range []float64{1, 2, 5, 10} {
			if m*e <= v*(1+1e-9) {
				below = m * e
			}
			if m*e >= v*(1-1e-9) && m*e < above {
				above = m * e
			}
		}
		return roundSig(below), roundSig(above)
	}
	lo, _ = steps(minV)
	_, hi = steps(maxV)
	if hi <= lo {
		_, hi = steps(lo * 1.5)
	}
	return lo, hi
}

// logTicks are the ticks of a log axis: 1, 2 and 5 × 10^k over up to three decades,
// powers of ten alone beyond.
func logTicks(lo, hi float64) []float64 {
	mults := []float64{1, 2, 5}
	if math.Log10(hi/lo) > 3 {
		mults = []float64{1}
	}
	var ticks []float64
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range mults {
			v := roundSig(m * math.Pow(10, e))
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				ticks = append(ticks, v)
			}
		}
	}
	return ticks
}

// roundSig drops the float noise of computed ticks (0.30000000000000004).
func roundSig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 9, 64), 64)
	return r
}

func tickLabel(v float64) string { return strconv.FormatFloat(roundSig(v), 'f', -1, 64) }

// seriesColors: distinct for up to five lines (then they repeat, with other markers).
var seriesColors = []color.RGBA{
	{0x55, 0x55, 0x55, 0xff}, // the first line, the baseline: dark grey
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
}

var (
	plotBackground = color.RGBA{0xff, 0xff, 0xff, 0xff}
	plotInk        = color.RGBA{0x22, 0x22, 0x22, 0xff}
	plotGrid       = color.RGBA{0xe2, 0xe2, 0xe2, 0xff}
)

const textScale = 2 // font pixels per glyph pixel

func textWidth(s string) int { return len([]rune(s)) * (glyphW + 1) * textScale }

// drawText writes s with its top-left corner at (x, y), or, vertical, reading upwards
// with its bottom-left corner at (x, y).
func drawText(img draw.Image, x, y int, s string, c color.Color, vertical bool) {
	adv := 0
	for _, r := range s {
		g := glyph(r)
		for gy, row := range g {
			for gx, ch := range row {
				if ch != '#' {
					continue
				}
				px, py := adv+gx*textScale, gy*textScale
				for dy := range textScale {
					for dx := range textScale {
						if vertical {
							img.Set(x+py+dy, y-px-dx, c)
						} else {
							img.Set(x+px+dx, y+py+dy, c)
						}
					}
				}
			}
		}
		adv += (glyphW + 1) * textScale
	}
}

func fillRect(img draw.Image, r image.Rectangle, c color.Color) {
	draw.Draw(img, r, image.NewUniform(c), image.Point{}, draw.Src)
}

// drawLine draws a line w pixels thick.
func drawLine(img draw.Image, x0, y0, x1, y1 float64, w int, c color.Color) {
	n := int(math.Max(math.Abs(x1-x0), math.Abs(y1-y0))) + 1
	for i := 0; i <= n; i++ {
		t := float64(i) / float64(n)
		x, y := int(math.Round(x0+t*(x1-x0))), int(math.Round(y0+t*(y1-y0)))
		fillRect(img, image.Rect(x-w/2, y-w/2, x-w/2+w, y-w/2+w), c)
	}
}

// drawMarker draws series i's marker centred on (x, y): a circle, square, diamond or
// triangle, so lines stay apart without colour too.
func drawMarker(img draw.Image, i int, x, y float64, c color.Color) {
	const r = 5
	cx, cy := int(math.Round(x)), int(math.Round(y))
	for dy := -r; dy <= r; dy++ {
		for dx := -r; dx <= r; dx++ {
			var in bool
			switch i % 4 {
			case 0:
				in = dx*dx+dy*dy <= r*r
			case 1:
				in = abs(dx) <= r-1 && abs(dy) <= r-1
			case 2:
				in = abs(dx)+abs(dy) <= r
			case 3:
				in = dy >= -r && 2*abs(dx) <= dy+r
			}
			if in {
				img.Set(cx+dx, cy+dy, c)
			}
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// legendRows lays the legend's names out in rows that fit across width.
func legendRows(names []string, width int) [][]string {
	var rows [][]string
	x := 0
	for _, n := range names {
		w := 40 + textWidth(n) + 30
		if len(rows) == 0 || x+w > width-40 {
			rows, x = append(rows, nil), 0
		}
		rows[len(rows)-1] = append(rows[len(rows)-1], n)
		x += w
	}
	return rows
}

// renderPlot draws the panels side by side, width×height pixels in all.
func renderPlot(panels []plotPanel, width, height int) *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fillRect(img, img.Bounds(), plotBackground)
	var names []string
	seen := map[string]bool{}
	for _, p := range panels {
		for _, s := range p.series {
			if !seen[s.name] {
				seen[s.name] = true
				names = append(names, s.name)
			}
		}
	}
	rows := legendRows(names, width)
	legendH := 16 + 28*len(rows)
	panelW := width / max(len(panels), 1)
	for i, p := range panels {
		drawPanel(img, p, image.Rect(i*panelW, 0, (i+1)*panelW, height-legendH), names)
	}
	// The legend: a line with the series' marker, then its name.
	y := height - legendH + 8
	for _, row := range rows {
		x := 40
		for _, n := range row {
			k := indexOf(names, n)
			c := seriesColors[k%len(seriesColors)]
			drawLine(img, float64(x), float64(y+8), float64(x+30), float64(y+8), 3, c)
			drawMarker(img, k, float64(x+15), float64(y+8), c)
			drawText(img, x+40, y, n, plotInk, false)
			x += 40 + textWidth(n) + 30
		}
		y += 28
	}
	return img
}

func indexOf(names []string, n string) int {
	for i, m := range names {
		if m == n {
			return i
		}
	}
	return 0
}

func drawPanel(img *image.RGBA, p plotPanel, r image.Rectangle, names []string) {
	area := image.Rect(r.Min.X+110, r.Min.Y+50, r.Max.X-30, r.Max.Y-70)
	// x: log, a little beyond the measured points.
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, v := range p.xTicks {
		xlo, xhi = math.Min(xlo, v), math.Max(xhi, v)
	}
	if !(xlo > 0) || xhi <= xlo {
		xlo, xhi = 1, 10
	}
	xs := axisScale{lo: xlo / 1.4, hi: xhi * 1.4, log: true, p0: float64(area.Min.X), p1: float64(area.Max.X)}
	// y: over every measured value.
	ylo, yhi := math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		for _, v := range s.y {
			if v > 0 && !math.IsInf(v, 0) {
				ylo, yhi = math.Min(ylo, v), math.Max(yhi, v)
			}
		}
	}
	ys := axisScale{log: p.logY, p0: float64(area.Max.Y), p1: float64(area.Min.Y)}
	var yTicks []float64
	if p.logY {
		ys.lo, ys.hi = logRange(ylo, yhi)
		yTicks = logTicks(ys.lo, ys.hi)
	} else {
		ys.hi, yTicks = linearRange(yhi, 5)
	}
	// Grid and tick labels.
	for _, v := range yTicks {
		y := int(math.Round(ys.pos(v)))
		fillRect(img, image.Rect(area.Min.X, y, area.Max.X, y+1), plotGrid)
		l := tickLabel(v)
		drawText(img, area.Min.X-10-textWidth(l), y-glyphH*textScale/2+1, l, plotInk, false)
	}
	for _, v := range p.xTicks {
		x := int(math.Round(xs.pos(v)))
		fillRect(img, image.Rect(x, area.Min.Y, x+1, area.Max.Y), plotGrid)
		fillRect(img, image.Rect(x, area.Max.Y, x+1, area.Max.Y+6), plotInk)
		l := tickLabel(v)
		drawText(img, x-textWidth(l)/2, area.Max.Y+10, l, plotInk, false)
	}
	// Frame, title, axis labels.
	fillRect(img, image.Rect(area.Min.X, area.Min.Y, area.Min.X+1, area.Max.Y+1), plotInk)
	fillRect(img, image.Rect(area.Min.X, area.Max.Y, area.Max.X+1, area.Max.Y+1), plotInk)
	fillRect(img, image.Rect(area.Max.X, area.Min.Y, area.Max.X+1, area.Max.Y+1), plotInk)
	fillRect(img, image.Rect(area.Min.X, area.Min.Y, area.Max.X+1, area.Min.Y+1), plotInk)
	drawText(img, (area.Min.X+area.Max.X-textWidth(p.title))/2, r.Min.Y+14, p.title, plotInk, false)
	drawText(img, (area.Min.X+area.Max.X-textWidth(p.xLabel))/2, area.Max.Y+40, p.xLabel, plotInk, false)
	drawText(img, r.Min.X+12, (area.Min.Y+area.Max.Y+textWidth(p.yLabel))/2, p.yLabel, plotInk, true)
	// The lines, then their markers on top.
	ok := func(s plotSeries, i int) bool {
		if i >= len(s.x) || i >= len(s.y) {
			return false
		}
		v := s.y[i]
		return !math.IsNaN(v) && !math.IsInf(v, 0) && (v > 0 || !p.logY && v >= 0)
	}
	for _, s := range p.series {
		k := indexOf(names, s.name)
		c := seriesColors[k%len(seriesColors)]
		for i := 1; i < len(s.y); i++ {
			if ok(s, i-1) && ok(s, i) {
				drawLine(img, xs.pos(s.x[i-1]), ys.pos(s.y[i-1]), xs.pos(s.x[i]), ys.pos(s.y[i]), 3, c)
			}
		}
		for i := range s.y {
			if ok(s, i) {
				drawMarker(img, k, xs.pos(s.x[i]), ys.pos(s.y[i]), c)
			}
		}
	}
}

// writePlot writes the panels to path as a PNG.
func writePlot(path string, panels []plotPanel, width, height int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, renderPlot(panels, width, height)); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
