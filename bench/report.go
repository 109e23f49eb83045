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
	streams    []*streamsResult
	allocs     []allocBudget
	floor      []*floorRow
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

func fmtBytes(b uint64) string {
	if b < 10<<10 {
		return fmt.Sprintf("%d B", b)
	}
	return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
}

func fmtMiB(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// cpuPerRequest is the gateway's CPU per completed request through it: the
// median over rounds of each through block's CPU per request.
func (r *row) cpuPerRequest() time.Duration {
	var per []float64
	for _, rd := range r.rounds {
		if rd.through != nil && rd.through.ok.Load() > 0 {
			per = append(per, float64(rd.cpu)/float64(rd.through.ok.Load()))
		}
	}
	if len(per) > 0 {
		return time.Duration(median(per))
	}
	return perN(r.cpu, r.through.ok.Load())
}

// perN is d over n (0 when n is 0).
func perN(d time.Duration, n int64) time.Duration {
	if n == 0 {
		return 0
	}
	return d / time.Duration(n)
}

// addedAt is through minus direct at percentile q of the latencies (or of
// the TTFBs): the median over rounds of each round's difference, so that a
// block slowed by the shared machine weighs no more than any other.
func (r *row) addedAt(q float64, ttfb bool) time.Duration {
	var per []float64
	for _, rd := range r.rounds {
		if rd.direct == nil || rd.through == nil || rd.direct.ok.Load() == 0 || rd.through.ok.Load() == 0 {
			continue
		}
		d, t := rd.direct.lat, rd.through.lat
		if ttfb {
			d, t = rd.direct.ttfb, rd.through.ttfb
		}
		per = append(per, float64(added(d, t, q)))
	}
	if len(per) > 0 {
		return time.Duration(median(per))
	}
	if ttfb {
		return added(r.direct.ttfb, r.through.ttfb, q)
	}
	return added(r.direct.lat, r.through.lat, q)
}

// cpuPerEvent is the gateway's CPU per SSE event it relayed (0 when none):
// its CPU per stream over the events of an average stream.
func (r *row) cpuPerEvent() time.Duration {
	n, ok := r.through.events.Load(), r.through.ok.Load()
	if n == 0 || ok == 0 || !strings.HasPrefix(r.mode, "stream") {
		return 0
	}
	return time.Duration(float64(r.cpuPerRequest()) * float64(ok) / float64(n))
}

// workerPerRequest is the worker's own CPU per request answered directly:
// the floor under the gateway's.
func (r *row) workerPerRequest() time.Duration {
	var per []float64
	for _, rd := range r.rounds {
		rec := rd.direct
		if r.noDirect {
			rec = rd.through
		}
		if rec != nil && rec.ok.Load() > 0 {
			per = append(per, float64(rd.worker)/float64(rec.ok.Load()))
		}
	}
	if len(per) > 0 {
		return time.Duration(median(per))
	}
	if r.noDirect {
		return perN(r.workerThrough, r.through.ok.Load())
	}
	return perN(r.workerDirect, r.direct.ok.Load())
}

// allocsPerRequest is the gateway's allocations and bytes per request.
func (r *row) allocsPerRequest() (uint64, uint64) {
	n := uint64(r.through.ok.Load())
	if n == 0 {
		return 0, 0
	}
	return r.mallocs / n, r.allocBytes / n
}

// profileText lists the top n entries of the row's CPU profile by their
// own time.
func (r *row) profileText(n int) string {
	return topText(r.flat, n, false)
}

func topText(es []topEntry, n int, cum bool) string {
	var parts []string
	for _, e := range es[:min(n, len(es))] {
		v := e.flat
		if cum {
			v = e.cum
		}
		parts = append(parts, fmt.Sprintf("%s %.1f%%", e.fn, v))
	}
	return strings.Join(parts, ", ")
}

// added is through minus direct at percentile q.
func added(a, b *hist, q float64) time.Duration { return b.quantile(q) - a.quantile(q) }

var tableHead = []string{"scenario", "mode", "target", "req/s", "p50", "p90", "p99", "TTFB p50", "TTFB p99",
	"errors", "gw CPU/req", "gw CPU/event", "worker CPU/req", "gw allocs/req", "gw idle RSS", "gw peak RSS", "note"}

// tableRows renders the comparison rows: direct, through poolgate, and the
// difference.
func (res *results) tableRows() [][]string {
	var out [][]string
	for _, r := range res.rows {
		d, t := r.direct, r.through
		line := func(name string, rec *recorder) []string {
			return []string{"", "", name, fmt.Sprintf("%.0f", rec.rps()), fmtDur(rec.lat.quantile(50)),
				fmtDur(rec.lat.quantile(90)), fmtDur(rec.lat.quantile(99)), fmtDur(rec.ttfb.quantile(50)),
				fmtDur(rec.ttfb.quantile(99)), fmt.Sprint(rec.errs.Load()), "", "", "", "", "", "", ""}
		}
		first := line("direct", d)
		first[0], first[1] = r.id+": "+r.title, r.mode
		through := line("poolgate", t)
		if r.noDirect {
			through[0], through[1] = first[0], first[1]
			through[12] = fmtMicros(r.workerPerRequest())
			through[10] = fmtMicros(r.cpuPerRequest())
			if e := r.cpuPerEvent(); e > 0 {
				through[11] = fmtMicros(e)
			}
			if n, bytes := r.allocsPerRequest(); n > 0 {
				through[13] = fmt.Sprintf("%d (%s)", n, fmtBytes(bytes))
			}
			through[14], through[15], through[16] = fmtMiB(r.idle.RSS), fmtMiB(r.mem.HWM), "no direct figure: the worker speaks Lingma's protocol"
			out = append(out, through)
			continue
		}
		through[10] = fmtMicros(r.cpuPerRequest())
		if e := r.cpuPerEvent(); e > 0 {
			through[11] = fmtMicros(e)
		}
		if w := r.workerPerRequest(); w > 0 {
			first[12] = fmtMicros(w)
		}
		if n, bytes := r.allocsPerRequest(); n > 0 {
			through[13] = fmt.Sprintf("%d (%s)", n, fmtBytes(bytes))
		}
		through[14], through[15], through[16] = fmtMiB(r.idle.RSS), fmtMiB(r.mem.HWM), r.note
		rps := "n/a"
		if d.rps() > 0 {
			rps = fmt.Sprintf("%+.0f%%", (t.rps()/d.rps()-1)*100)
		}
		diff := []string{"", "", "added", rps, fmtDelta(r.addedAt(50, false)), fmtDelta(r.addedAt(90, false)),
			fmtDelta(r.addedAt(99, false)), fmtDelta(r.addedAt(50, true)), fmtDelta(r.addedAt(99, true)),
			"", "", "", "", "", "", "", ""}
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
	if len(res.streams) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "4: slow streams\t"+strings.Join(streamsHead, "\t"))
		for _, s := range res.streams {
			fmt.Fprintln(tw, "\t"+strings.Join(s.tableRow(), "\t"))
		}
	}
	if len(res.floor) > 0 {
		head, cells := floorTable(res.floor)
		fmt.Fprintln(tw)
		for _, line := range append([][]string{head}, cells...) {
			fmt.Fprintln(tw, strings.Join(line, "\t"))
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "target\tmeasured\tresult")
	for _, t := range res.targets() {
		fmt.Fprintln(tw, strings.Join(t, "\t"))
	}
	return tw.Flush()
}

// The gateway's targets for its cost per request and its added latency,
// with the figures measured before the work on them began, on the same kind
// of machine.
const (
	targetCPU50         = 90 * time.Microsecond  // was 210 µs
	targetAdded1        = 200 * time.Microsecond // was +0.46 ms
	targetCPU1          = 200 * time.Microsecond // was 498 µs
	targetSlowP50       = 300 * time.Microsecond // was +1.04 ms
	targetSlowP99       = 2 * time.Millisecond   // was +4.9 ms
	targetStreamCPU     = 600 * time.Microsecond // was 1.31 ms per stream
	targetEventCPU      = 6 * time.Microsecond   // was 13 µs per event
	targetTTFT1         = 300 * time.Microsecond // was +0.77 ms
	targetStreamsRSS    = 100 << 20              // was 136 MiB at 1,000 streams
	targetStreamsCPU    = 2500 * time.Microsecond
	targetIdleRSS       = 26 << 20 // was 24 MiB: keep
	targetAfterLoadRSS  = 52 << 20 // was 47 MiB: keep
	targetStreamsBigRSS = 512 << 20
)

// targets checks the targets against the run: name, measured, result.
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
	if r := find("2", "non-stream"); r != nil {
		out = append(out, []string{"non-stream, 50 clients: gateway CPU per request <= 90 µs (was 210 µs)",
			fmt.Sprintf("%s (worker: %s)", fmtMicros(r.cpuPerRequest()), fmtMicros(r.workerPerRequest())),
			verdict(r.cpuPerRequest() <= targetCPU50, r)})
	}
	if r := find("1", "non-stream"); r != nil {
		a := r.addedAt(50, false)
		out = append(out, []string{"non-stream, 1 client: added p50 <= +0.2 ms (was +0.46 ms)",
			fmt.Sprintf("%s (direct %s)", fmtDelta(a), fmtDur(r.direct.lat.quantile(50))), verdict(a <= targetAdded1, r)})
		out = append(out, []string{"non-stream, 1 client: gateway CPU per request <= 200 µs (was 498 µs)",
			fmtMicros(r.cpuPerRequest()), verdict(r.cpuPerRequest() <= targetCPU1, r)})
	}
	if r := find("3", "non-stream"); r != nil {
		p50, p99 := r.addedAt(50, false), r.addedAt(99, false)
		out = append(out, []string{"50 ms worker, 50 clients: added p50 / p99 <= +0.3 / +2 ms (was +1.04 / +4.9 ms)",
			fmt.Sprintf("%s / %s (direct %s / %s)", fmtDelta(p50), fmtDelta(p99), fmtDur(r.direct.lat.quantile(50)),
				fmtDur(r.direct.lat.quantile(99))),
			verdict(p50 <= targetSlowP50 && p99 <= targetSlowP99, r)})
	}
	if r := find("2", "stream"); r != nil {
		out = append(out, []string{"stream (100 chunks), 50 clients: gateway CPU per stream <= 0.6 ms, per event <= 6 µs (was 1.31 ms, 13 µs)",
			fmt.Sprintf("%s per stream, %s per event", fmtMicros(r.cpuPerRequest()), fmtMicros(r.cpuPerEvent())),
			verdict(r.cpuPerRequest() <= targetStreamCPU && r.cpuPerEvent() <= targetEventCPU, r)})
	}
	if r := find("1", "stream"); r != nil {
		a := r.addedAt(50, true)
		out = append(out, []string{"stream (100 chunks), 1 client: added time to first token <= +0.3 ms (was +0.77 ms)",
			fmt.Sprintf("%s (direct %s)", fmtDelta(a), fmtDur(r.direct.ttfb.quantile(50))), verdict(a <= targetTTFT1, r)})
	}
	for _, s := range res.streams {
		out = append(out, s.target())
	}
	for _, a := range res.allocs {
		out = append(out, a.target())
	}
	if r := find("1", "non-stream"); r != nil {
		out = append(out, []string{"idle RSS: keep (24 MiB; <= 26 MiB)", fmtMiB(r.idle.RSS), verdict(r.idle.RSS <= targetIdleRSS, nil)})
	}
	if r := find("2", "stream"); r != nil {
		out = append(out, []string{"RSS after load (50 clients, both modes): keep (47 MiB; <= 52 MiB)", fmtMiB(r.mem.HWM),
			verdict(r.mem.HWM <= targetAfterLoadRSS, nil)})
	}
	return out
}

func (s *streamsResult) target() []string {
	measured := fmt.Sprintf("%s peak with %d open, %s per stream", fmtMiB(s.mem.HWM), s.maxOpen, fmtMicros(s.cpuPerStream()))
	name := "1,000 open paced streams: peak RSS <= 100 MiB, CPU per stream <= 2.5 ms (was 136 MiB, 4.5 ms)"
	met := s.mem.HWM <= targetStreamsRSS && s.cpuPerStream() <= targetStreamsCPU && s.rec.errs.Load() == 0
	if s.want != 1000 {
		name, met = fmt.Sprintf("%d open streams < 512 MiB", s.want), s.rssOpen < targetStreamsBigRSS
	}
	switch {
	case s.maxOpen < int64(s.want):
		return []string{name, measured, fmt.Sprintf("missed: only %d of %d streams were open at once", s.maxOpen, s.want)}
	case met:
		return []string{name, measured, "met"}
	}
	return []string{name, measured, "missed"}
}

// cpuPerStream is the gateway's CPU per completed slow stream.
func (s *streamsResult) cpuPerStream() time.Duration { return perN(s.cpu, s.rec.ok.Load()) }

// plotPoints returns the non-streaming closed-loop rows by concurrency.
func (res *results) plotPoints() []point {
	var pts []point
	for _, r := range res.rows {
		if r.concurrency > 0 && r.mode == "non-stream" && r.through.ok.Load() > 0 && r.direct.ok.Load() > 0 {
			pts = append(pts, point{c: r.concurrency, p50: r.addedAt(50, false),
				p99: r.addedAt(99, false)})
		}
	}
	sortPoints(pts)
	return pts
}
