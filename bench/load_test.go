package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func near(got, want time.Duration) bool {
	diff := got - want
	if diff < 0 {
		diff = -diff
	}
	return diff <= want/200 // HDR's 3 significant digits, with room
}

func TestHistPercentiles(t *testing.T) {
	tests := []struct {
		name string
		give map[time.Duration]int // value -> how often
		q    float64
		want time.Duration
	}{
		{"uniform p50", uniform(100_000), 50, 50 * time.Millisecond},
		{"uniform p90", uniform(100_000), 90, 90 * time.Millisecond},
		{"uniform p99", uniform(100_000), 99, 99 * time.Millisecond},
		{"tail below p99", map[time.Duration]int{time.Millisecond: 990, time.Second: 10}, 99, time.Millisecond},
		{"tail at p99.9", map[time.Duration]int{time.Millisecond: 990, time.Second: 10}, 99.9, time.Second},
		{"sub-microsecond clamps to 1 µs", map[time.Duration]int{100 * time.Nanosecond: 5}, 50, time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHist()
			for v, n := range tt.give {
				for range n {
					h.record(v)
				}
			}
			if got := h.quantile(tt.q); !near(got, tt.want) {
				t.Errorf("p%v = %s, want %s", tt.q, got, tt.want)
			}
		})
	}
}

// uniform is 1 µs, 2 µs, ... n µs, once each.
func uniform(n int) map[time.Duration]int {
	m := make(map[time.Duration]int, n)
	for i := 1; i <= n; i++ {
		m[time.Duration(i)*time.Microsecond] = 1
	}
	return m
}

func TestHistMergeConcurrent(t *testing.T) {
	a, b := newHist(), newHist()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 1000 {
				if i%2 == 0 {
					a.record(time.Duration(j+1) * time.Microsecond)
				} else {
					b.record(time.Duration(j+1) * time.Microsecond)
				}
			}
		})
	}
	wg.Wait()
	a.merge(b)
	if got := a.count(); got != 8000 {
		t.Errorf("count %d after merge, want 8000", got)
	}
	if got := a.quantile(50); !near(got, 500*time.Microsecond) {
		t.Errorf("p50 %s, want 500µs", got)
	}
}

// A stall under a constant rate must show in the requests it held back:
// latency counts from the scheduled send, not from when the request left.
func TestConstantRateCountsFromSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 100 requests at 100/s (one per 10 ms), one at a time; each takes
		// 5 ms except request 10, which stalls for 500 ms.
		var mu sync.Mutex
		lat := map[int]time.Duration{}
		start := time.Now()
		do := func(ctx context.Context, seq int) outcome {
			d := 5 * time.Millisecond
			if seq == 10 {
				d = 500 * time.Millisecond
			}
			time.Sleep(d)
			mu.Lock()
			lat[seq] = time.Since(start.Add(time.Duration(seq) * 10 * time.Millisecond))
			mu.Unlock()
			return outcome{firstByte: time.Now()}
		}
		rec := newRecorder()
		constantRate(context.Background(), 100, 100, 1, do, rec)

		// Request 11 was due at 110 ms but could only leave when 10 ended at
		// 600 ms: 495 ms late plus its own 5 ms. Each later one catches up
		// 5 ms (it takes 5 of its 10 ms slot): request k waits 550-5k ms.
		for _, k := range []int{11, 50, 90} {
			if want := time.Duration(550-5*k) * time.Millisecond; lat[k] != want {
				t.Errorf("request %d: %s after its schedule, want %s", k, lat[k], want)
			}
		}
		if got, want := rec.late.Load(), int64(89); got != want { // 11..99 left late
			t.Errorf("%d late sends, want %d", got, want)
		}
		// Sorted: ten at 5 ms, nine from 55 to 95 ms, then 100 ms up to
		// 500 ms in 5 ms steps: the 50th is 250 ms. Had latency counted from
		// the actual send, p50 would be 5 ms and the stall one outlier.
		if got := rec.lat.quantile(50); !near(got, 250*time.Millisecond) {
			t.Errorf("p50 %s, want 250ms", got)
		}
		if got := rec.lat.quantile(100); !near(got, 500*time.Millisecond) {
			t.Errorf("max %s, want 500ms", got)
		}
		if got := rec.ok.Load(); got != 100 {
			t.Errorf("%d requests done, want 100", got)
		}
	})
}

func TestConstantRateStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 95*time.Millisecond)
		defer cancel()
		rec := newRecorder()
		constantRate(ctx, 100, 1000, 10, func(context.Context, int) outcome { return outcome{} }, rec)
		if got := rec.ok.Load(); got != 10 { // sends at 0, 10, ..., 90 ms
			t.Errorf("%d requests before the cancel, want 10", got)
		}
	})
}

func TestClosedLoopBounds(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		dur      time.Duration
		wantDone int64
	}{
		{"count", 50, time.Hour, 50},
		{"time", unbounded, 100 * time.Millisecond, 4 * 10}, // 4 clients, 10 ms each
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				do := func(context.Context, int) outcome {
					time.Sleep(10 * time.Millisecond)
					return outcome{events: 2}
				}
				closedLoop(context.Background(), 4, tt.n, tt.dur, do, rec)
				if got := rec.ok.Load(); got != tt.wantDone {
					t.Errorf("%d requests, want %d", got, tt.wantDone)
				}
				if got := rec.events.Load(); got != 2*tt.wantDone {
					t.Errorf("%d events, want %d", got, 2*tt.wantDone)
				}
			})
		})
	}
}

func TestRecorderCountsErrors(t *testing.T) {
	rec := newRecorder()
	now := time.Now()
	rec.observe(now, outcome{err: errors.New("boom")}, now)
	rec.observe(now, outcome{err: errors.New("second")}, now)
	rec.observe(now.Add(-time.Millisecond), outcome{firstByte: now}, now)
	if rec.errs.Load() != 2 || rec.ok.Load() != 1 || rec.lat.count() != 1 {
		t.Errorf("errs %d ok %d latencies %d, want 2, 1, 1", rec.errs.Load(), rec.ok.Load(), rec.lat.count())
	}
	if rec.firstErr == nil || rec.firstErr.Error() != "boom" {
		t.Errorf("first error %v, want boom", rec.firstErr)
	}
}

// count returns how many latencies were recorded.
func (h *hist) count() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h.TotalCount()
}
