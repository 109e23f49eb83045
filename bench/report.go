package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// results is everything one run measured.
type results struct {
	plan       plan
	machine    machine
	started    time.Time
	took       time.Duration
	loadBefore float64
	loadAfter  float64
	note       string
	rows       []*row
	streams    *streamsResult
}

func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10 && ms > -10:
		return fmt.Sprintf("%.3f ms", ms)
	case ms < 1000 && ms > -1000:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

func fmtDelta(d time.Duration) string {
	if d >= 0 {
		return "+" + fmtDur(d)
	}
	return fmtDur(d)
}

func fmtMicros(d time.Duration) string {
	return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// cpuPerRequest is the gateway's CPU per completed request through it.
func (r *row) cpuPerRequest() time.Duration {
	n := r.through.ok.Load()
	if n == 0 {
		return 0
	}
	return r.cpu / time.Duration(n)
}

// cpuPerEvent is the gateway's CPU per SSE event it relayed (0 when none).
func (r *row) cpuPerEvent() time.Duration {
	n := r.through.events.Load()
	if n == 0 || !strings.HasPrefix(r.mode, "stream") {
		return 0
	}
	return r.cpu / time.Duration(n)
}

// added is through minus direct at percentile q.
func added(a, b *hist, q float64) time.Duration { return b.quantile(q) - a.quantile(q) }

var tableHead = []string{"scenario", "mode", "target", "req/s", "p50", "p90", "p99", "TTFB p50", "TTFB p99",
	"errors", "gw CPU/req", "gw CPU/event", "gw idle RSS", "gw peak RSS", "note"}

// tableRows renders the comparison rows: direct, through poolgate, and the
// difference.
func (res *results) tableRows() [][]string {
	var out [][]string
	for _, r := range res.rows {
		d, t := r.direct, r.through
		line := func(name string, rec *recorder) []string {
			return []string{"", "", name, fmt.Sprintf("%.0f", rec.rps()), fmtDur(rec.lat.quantile(50)),
				fmtDur(rec.lat.quantile(90)), fmtDur(rec.lat.quantile(99)), fmtDur(rec.ttfb.quantile(50)),
				fmtDur(rec.ttfb.quantile(99)), fmt.Sprint(rec.errs.Load()), "", "", "", "", ""}
		}
		first := line("direct", d)
		first[0], first[1] = r.id+": "+r.title, r.mode
		through := line("poolgate", t)
		through[10] = fmtMicros(r.cpuPerRequest())
		if e := r.cpuPerEvent(); e > 0 {
			through[11] = fmtMicros(e)
		}
		through[12], through[13], through[14] = fmtMiB(r.idle.RSS), fmtMiB(r.mem.HWM), r.note
		rps := "n/a"
		if d.rps() > 0 {
			rps = fmt.Sprintf("%+.0f%%", (t.rps()/d.rps()-1)*100)
		}
		diff := []string{"", "", "added", rps, fmtDelta(added(d.lat, t.lat, 50)), fmtDelta(added(d.lat, t.lat, 90)),
			fmtDelta(added(d.lat, t.lat, 99)), fmtDelta(added(d.ttfb, t.ttfb, 50)), fmtDelta(added(d.ttfb, t.ttfb, 99)),
			"", "", "", "", "", ""}
		out = append(out, first, through, diff)
	}
	return out
}

var streamsHead = []string{"streams", "open at once", "late opens", "errors", "time to first event p50", "p99",
	"stream time p50", "gw idle RSS", "gw RSS, all open", "gw peak RSS", "gw CPU/stream", "gw CPU/event"}

func (s *streamsResult) tableRow() []string {
	perStream, perEvent := "n/a", "n/a"
	if n := s.rec.ok.Load(); n > 0 {
		perStream = fmtMicros(s.cpu / time.Duration(n))
	}
	if n := s.rec.events.Load(); n > 0 {
		perEvent = fmtMicros(s.cpu / time.Duration(n))
	}
	return []string{fmt.Sprint(s.want), fmt.Sprint(s.maxOpen), fmt.Sprint(s.rec.late.Load()), fmt.Sprint(s.rec.errs.Load()),
		fmtDur(s.rec.ttfb.quantile(50)), fmtDur(s.rec.ttfb.quantile(99)), fmtDur(s.rec.lat.quantile(50)),
		fmtMiB(s.idle.RSS), fmtMiB(s.rssOpen), fmtMiB(s.mem.HWM), perStream, perEvent}
}

// printTable writes the results as aligned text.
func (res *results) printTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, cells := range append([][]string{tableHead}, res.tableRows()...) {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if res.streams != nil {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "4: slow streams\t"+strings.Join(streamsHead, "\t"))
		fmt.Fprintln(tw, "\t"+strings.Join(res.streams.tableRow(), "\t"))
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "target\tmeasured\tresult")
	for _, t := range res.targets() {
		fmt.Fprintln(tw, strings.Join(t, "\t"))
	}
	return tw.Flush()
}

// targets checks the design's targets against the run: name, measured, result.
func (res *results) targets() [][]string {
	find := func(id, mode string) *row {
		for _, r := range res.rows {
			if r.id == id && strings.HasPrefix(r.mode, mode) {
				return r
			}
		}
		return nil
	}
	verdict := func(ok bool, r *row) string {
		v := map[bool]string{true: "met", false: "missed"}[ok]
		if r != nil && r.through.errs.Load() > 0 {
			v += fmt.Sprintf(" (with %d errors)", r.through.errs.Load())
		}
		return v
	}
	var out [][]string
	if r2, r1 := find("2", "non-stream"), find("1", "non-stream"); r2 != nil && r1 != nil {
		out = append(out, []string{"gateway CPU < 100 µs per non-streaming request",
			fmt.Sprintf("%s at 200 clients (%s at 1 client)", fmtMicros(r2.cpuPerRequest()), fmtMicros(r1.cpuPerRequest())),
			verdict(r2.cpuPerRequest() < 100*time.Microsecond && r1.cpuPerRequest() < 100*time.Microsecond, r2)})
	}
	if r := find("2", "stream"); r != nil {
		out = append(out, []string{"gateway CPU < 10 µs per streamed event",
			fmt.Sprintf("%s at 200 clients (%s per stream of %d events)", fmtMicros(r.cpuPerEvent()), fmtMicros(r.cpuPerRequest()),
				r.through.events.Load()/max(r.through.ok.Load(), 1)),
			verdict(r.cpuPerEvent() < 10*time.Microsecond, r)})
	}
	if r := find("1", "non-stream"); r != nil {
		a := added(r.direct.lat, r.through.lat, 50)
		out = append(out, []string{"added p50 < 0.3 ms at concurrency 1", fmtDelta(a), verdict(a < 300*time.Microsecond, r)})
		out = append(out, []string{"idle RSS < 40 MiB", fmtMiB(r.idle.RSS), verdict(r.idle.RSS < 40<<20, nil)})
	}
	if s := res.streams; s != nil {
		out = append(out, s.target())
	}
	return out
}

func (s *streamsResult) target() []string {
	name := "5,000 open streams < 512 MiB"
	measured := fmt.Sprintf("%s with %d open", fmtMiB(s.rssOpen), s.maxOpen)
	switch {
	case s.want < 5000:
		return []string{name, measured, fmt.Sprintf("not measured: this short run opened %d streams", s.want)}
	case s.maxOpen < 5000:
		return []string{name, measured, fmt.Sprintf("missed: only %d of %d streams were open at once", s.maxOpen, s.want)}
	case s.rssOpen < 512<<20:
		return []string{name, measured, "met"}
	default:
		return []string{name, measured, "missed"}
	}
}

// plotPoints returns the non-streaming closed-loop rows by concurrency.
func (res *results) plotPoints() []point {
	var pts []point
	for _, r := range res.rows {
		if r.concurrency > 0 && r.mode == "non-stream" && r.through.ok.Load() > 0 && r.direct.ok.Load() > 0 {
			pts = append(pts, point{c: r.concurrency, p50: added(r.direct.lat, r.through.lat, 50),
				p99: added(r.direct.lat, r.through.lat, 99)})
		}
	}
	sortPoints(pts)
	return pts
}
