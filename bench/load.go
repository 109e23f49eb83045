package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// hist is a latency histogram (HDR: 1 µs to 10 min at 3 significant
// digits), safe for concurrent use. One mutex is cheap next to an HTTP
// round trip and keeps memory flat however many clients record into it.
type hist struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

const histMax = int64(10 * time.Minute / time.Microsecond)

func newHist() *hist { return &hist{h: hdrhistogram.New(1, histMax, 3)} }

// record adds one latency; values outside the range are clamped.
func (h *hist) record(d time.Duration) {
	us := min(max(d.Microseconds(), 1), histMax)
	h.mu.Lock()
	_ = h.h.RecordValue(us) // in range by construction
	h.mu.Unlock()
}

// quantile returns the latency at percentile q (0 to 100).
func (h *hist) quantile(q float64) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Duration(h.h.ValueAtQuantile(q)) * time.Microsecond
}

// merge adds every value of o to h.
func (h *hist) merge(o *hist) {
	o.mu.Lock()
	snap := hdrhistogram.Import(o.h.Export())
	o.mu.Unlock()
	h.mu.Lock()
	h.h.Merge(snap)
	h.mu.Unlock()
}

// outcome is what one request reports back to the load generator.
type outcome struct {
	// firstByte is when the response headers (non-streaming) or the first SSE
	// data line (streaming) arrived; zero when none did.
	firstByte time.Time
	// events counts SSE data events, [DONE] excluded.
	events int
	err    error
}

// requestFunc issues request number seq and waits for its whole answer.
type requestFunc func(ctx context.Context, seq int) outcome

// recorder collects the outcomes of one measured block.
type recorder struct {
	lat, ttfb *hist
	ok, errs  atomic.Int64
	events    atomic.Int64
	// late counts constant-rate sends that left more than a millisecond after
	// their scheduled time because the in-flight cap was reached.
	late    atomic.Int64
	elapsed time.Duration

	mu       sync.Mutex
	firstErr error
}

func newRecorder() *recorder { return &recorder{lat: newHist(), ttfb: newHist()} }

// observe records one outcome; latencies count from ref, which is the send
// time in a closed loop and the scheduled time at a constant rate.
func (r *recorder) observe(ref time.Time, o outcome, end time.Time) {
	if o.err != nil {
		r.errs.Add(1)
		r.mu.Lock()
		if r.firstErr == nil {
			r.firstErr = o.err
		}
		r.mu.Unlock()
		return
	}
	r.ok.Add(1)
	r.events.Add(int64(o.events))
	r.lat.record(end.Sub(ref))
	if !o.firstByte.IsZero() {
		r.ttfb.record(o.firstByte.Sub(ref))
	}
}

// merge adds o's counts to r (elapsed times add up: blocks run one after another).
func (r *recorder) merge(o *recorder) {
	r.lat.merge(o.lat)
	r.ttfb.merge(o.ttfb)
	r.ok.Add(o.ok.Load())
	r.errs.Add(o.errs.Load())
	r.events.Add(o.events.Load())
	r.late.Add(o.late.Load())
	r.elapsed += o.elapsed
	o.mu.Lock()
	err := o.firstErr
	o.mu.Unlock()
	r.mu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.mu.Unlock()
}

// rps is the completed requests per second of wall time.
func (r *recorder) rps() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.ok.Load()) / r.elapsed.Seconds()
}

// closedLoop runs clients that each issue requests back to back, until n
// requests were started in all or dur has passed, and records into rec.
// A request in flight at the deadline finishes and counts.
func closedLoop(ctx context.Context, clients, n int, dur time.Duration, do requestFunc, rec *recorder) {
	var next atomic.Int64
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				seq := next.Add(1) - 1
				if seq >= int64(n) {
					return
				}
				t0 := time.Now()
				o := do(ctx, int(seq))
				rec.observe(t0, o, time.Now())
			}
		})
	}
	wg.Wait()
	rec.elapsed = time.Since(start)
}

// constantRate sends n requests at rate per second (open loop) with at most
// maxInFlight outstanding. Each latency counts from the request's scheduled
// send time, not from when it actually left: a stall that holds back later
// sends shows in their latencies instead of silently thinning the load
// (coordinated omission).
func constantRate(ctx context.Context, rate float64, n, maxInFlight int, do requestFunc, rec *recorder) {
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, maxInFlight)
	start := time.Now()
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
loop:
	for i := range n {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				break loop
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		if time.Since(sched) > time.Millisecond {
			rec.late.Add(1)
		}
		wg.Go(func() {
			defer func() { <-sem }()
			o := do(ctx, i)
			rec.observe(sched, o, time.Now())
		})
	}
	wg.Wait()
	rec.elapsed = time.Since(start)
}
