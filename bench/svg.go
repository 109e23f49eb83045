package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// point is the added latency at one concurrency.
type point struct {
	c        int
	p50, p99 time.Duration
}

func sortPoints(pts []point) {
	slices.SortFunc(pts, func(a, b point) int { return a.c - b.c })
}

// niceStep picks a tick step of 1, 2 or 5 times a power of ten that splits
// span into at most about six intervals.
func niceStep(span float64) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / 6
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			return m * pow
		}
	}
	return 10 * pow
}

// plotSVG draws added p50 and p99 latency (ms) against concurrency on a log
// x axis. Hand-written: one small chart doesn't justify a plotting library
// and its font and image dependencies in the module.
func plotSVG(pts []point, title string) string {
	const w, h, left, right, top, bottom = 720.0, 400.0, 70.0, 130.0, 50.0, 55.0
	pw, ph := w-left-right, h-top-bottom
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%.0f" height="%.0f" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="24" text-anchor="middle" font-size="15">%s</text>`+"\n", left+pw/2, escape(title))
	if len(pts) == 0 {
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="middle">no data</text></svg>`+"\n", w/2, h/2)
		return b.String()
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	lo, hi := 0.0, 0.0
	for _, p := range pts {
		lo, hi = min(lo, ms(p.p50), ms(p.p99)), max(hi, ms(p.p50), ms(p.p99))
	}
	step := niceStep(hi - lo)
	lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	if hi == lo {
		hi = lo + step
	}
	cmin, cmax := math.Log(float64(pts[0].c)), math.Log(float64(pts[len(pts)-1].c))
	if cmax == cmin {
		cmin, cmax = cmin-1, cmax+1
	}
	x := func(c int) float64 { return left + (math.Log(float64(c))-cmin)/(cmax-cmin)*pw }
	y := func(v float64) float64 { return top + (hi-v)/(hi-lo)*ph }
	for v := lo; v <= hi+step/2; v += step { // horizontal grid and y labels
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, left+pw, y(v), y(v),
			map[bool]string{true: "#888", false: "#e4e4e4"}[math.Abs(v) < step/2])
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-8, y(v)+4, trimFloat(v))
	}
	for _, p := range pts { // x ticks at the measured concurrencies
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e4e4e4"/>`+"\n", x(p.c), x(p.c), top, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(p.c), top+ph+18, p.c)
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">concurrent clients (log scale)</text>`+"\n", left+pw/2, h-12)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">added latency (ms)</text>`+"\n", top+ph/2)
	for i, s := range []struct {
		name, color string
		v           func(point) time.Duration
	}{
		{"p50", "#1f77b4", func(p point) time.Duration { return p.p50 }},
		{"p99", "#d62728", func(p point) time.Duration { return p.p99 }},
	} {
		var xs, ys []float64
		for _, p := range pts {
			xs, ys = append(xs, x(p.c)), append(ys, y(ms(s.v(p))))
		}
		drawSeries(&b, xs, ys, s.color)
		ly := top + 20 + float64(i)*22 // legend
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", left+pw+15, left+pw+40, ly, ly, s.color)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+pw+46, ly+4, s.name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// drawSeries draws a line through the points, with a dot on each.
func drawSeries(b *strings.Builder, xs, ys []float64, color string) {
	var coords []string
	for i := range xs {
		coords = append(coords, fmt.Sprintf("%.1f,%.1f", xs[i], ys[i]))
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(coords, " "))
	for i := range xs {
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>`+"\n", xs[i], ys[i], color)
	}
}

func trimFloat(v float64) string {
	s := strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
