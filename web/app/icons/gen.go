//go:build ignore

// gen draws the app's PNG icons (the same logo as icon.svg: a chat bubble on a rounded
// square). It is deterministic, so the committed PNGs change only when this file does.
// The build copies them into web/dist; run it again only to change the logo:
//
//	go run web/app/icons/gen.go web/app/icons
package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
)

var (
	brand = color.NRGBA{0x4f, 0x46, 0xe5, 0xff} // the manifest's theme_color
	white = color.NRGBA{0xff, 0xff, 0xff, 0xff}
)

// The logo in unit coordinates (0..1 both ways, y down), as icon.svg draws it in 0..100.

func roundedRect(x, y, x0, y0, x1, y1, r float64) bool {
	if x < x0 || x > x1 || y < y0 || y > y1 {
		return false
	}
	cx := math.Max(x0+r, math.Min(x, x1-r))
	cy := math.Max(y0+r, math.Min(y, y1-r))
	return (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r
}

// inTriangle: the bubble's tail, (30,64) (30,82) (46,66).
func inTail(x, y float64) bool {
	ax, ay, bx, by, cx, cy := 0.30, 0.64, 0.30, 0.82, 0.46, 0.66
	d1 := (x-bx)*(ay-by) - (ax-bx)*(y-by)
	d2 := (x-cx)*(by-cy) - (bx-cx)*(y-cy)
	d3 := (x-ax)*(cy-ay) - (cx-ax)*(y-ay)
	neg := d1 < 0 || d2 < 0 || d3 < 0
	pos := d1 > 0 || d2 > 0 || d3 > 0
	return !(neg && pos)
}

func inDot(x, y float64) bool {
	for _, cx := range []float64{0.35, 0.50, 0.65} {
		if (x-cx)*(x-cx)+(y-0.46)*(y-0.46) <= 0.05*0.05 {
			return true
		}
	}
	return false
}

// paint is the colour at (x, y), or false outside the icon.
func paint(x, y float64, maskable bool) (color.NRGBA, bool) {
	if !maskable && !roundedRect(x, y, 0, 0, 1, 1, 0.22) {
		return color.NRGBA{}, false
	}
	if maskable {
		// Maskable icons fill the square and keep the logo inside the safe circle (40%
		// of the size around the centre): draw it at 80%.
		x, y = 0.5+(x-0.5)/0.8, 0.5+(y-0.5)/0.8
	}
	if (roundedRect(x, y, 0.20, 0.24, 0.80, 0.68, 0.12) || inTail(x, y)) && !inDot(x, y) {
		return white, true
	}
	return brand, true
}

// draw renders the logo at size×size with 4×4 samples per pixel.
func draw(size int, maskable bool) *image.NRGBA {
	const ss = 4
	img := image.NewNRGBA(image.Rect(0, 0, size, size))
	for py := 0; py < size; py++ {
		for px := 0; px < size; px++ {
			var r, g, b, a float64
			for sy := 0; sy < ss; sy++ {
				for sx := 0; sx < ss; sx++ {
					x := (float64(px) + (float64(sx)+0.5)/ss) / float64(size)
					y := (float64(py) + (float64(sy)+0.5)/ss) / float64(size)
					if c, ok := paint(x, y, maskable); ok {
						r += float64(c.R)
						g += float64(c.G)
						b += float64(c.B)
						a++
					}
				}
			}
			if a == 0 {
				continue
			}
			img.SetNRGBA(px, py, color.NRGBA{
				R: uint8(math.Round(r / a)),
				G: uint8(math.Round(g / a)),
				B: uint8(math.Round(b / a)),
				A: uint8(math.Round(255 * a / ss / ss)),
			})
		}
	}
	return img
}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	for _, icon := range []struct {
		name     string
		size     int
		maskable bool
	}{
		{"icon-192.png", 192, false},
		{"icon-512.png", 512, false},
		{"maskable-512.png", 512, true},
		{"apple-touch-icon.png", 180, true}, // iOS rounds it itself and shows no transparency
	} {
		f, err := os.Create(filepath.Join(dir, icon.name))
		if err == nil {
			err = png.Encode(f, draw(icon.size, icon.maskable))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
