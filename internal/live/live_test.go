package live

import (
	"fmt"
	"testing"
	"time"
)

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		status int
		failed bool
		want   int
	}{
		{200, false, OK}, {200, true, Failed}, {429, false, Rejected}, {400, false, Client}, {401, true, Client},
		{500, false, Failed}, {503, false, Failed},
	} {
		if got := Outcome(c.status, c.failed); got != c.want {
			t.Errorf("Outcome(%d, %v) = %s, want %s", c.status, c.failed, OutcomeNames[got], OutcomeNames[c.want])
		}
	}
}

func TestSeriesAndSummaries(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	r := New(10*time.Second, 360, 3)
	// 20 answered requests of 100-200 ms on a, one 429 on b, in the step of
	// start; then one failure on a 30 s later.
	for i := range 20 {
		r.Observe(start, "a", OK, time.Duration(100+5*i)*time.Millisecond, 40*time.Millisecond)
	}
	r.Observe(start, "b", Rejected, time.Millisecond, 0)
	r.Sample(start, 3, 7, map[string]int{"a": 2, "idle": 0})
	later := start.Add(30 * time.Second)
	r.Observe(later, "a", Failed, 2*time.Second, 0)

	v := r.View(later, "", 5*time.Minute)
	if len(v.Series) != 360 {
		t.Fatalf("%d points, want 360", len(v.Series))
	}
	last, first := v.Series[359], v.Series[356]
	if first.Requests != 21 || first.RPS[OK] != 2 || first.RPS[Rejected] != 0.1 || first.Errors != 1 {
		t.Errorf("start's step %+v, want 21 requests, 2/s ok, 0.1/s rejected", first)
	}
	if first.P50 < 100 || first.P50 > 250 || first.P95 < first.P50 || first.TTFT50 < 25 || first.TTFT50 > 50 {
		t.Errorf("start's step percentiles %+v", first)
	}
	if first.Queue != 3 || first.InFlight != 7 || last.Queue != -1 {
		t.Errorf("samples: start's %d/%d, last %d, want 3/7 and none", first.Queue, first.InFlight, last.Queue)
	}
	if last.Requests != 1 || last.RPS[Failed] != 0.1 || last.TTFT50 != -1 {
		t.Errorf("last step %+v", last)
	}
	if len(v.Accounts) != 2 || v.Accounts[0].Account != "a" || v.Accounts[0].Requests != 21 ||
		v.Accounts[0].Errors != 1 || v.Accounts[0].InFlight != 2 || v.Accounts[1].Account != "b" {
		t.Errorf("summaries %+v", v.Accounts)
	}
	if sp := v.Accounts[0].Spark; len(sp) != 60 || sp[59] != 21 {
		t.Errorf("a's spark %v, want 60 minutes ending with 21", sp)
	}

	one := r.View(later, "b", time.Minute)
	if one.Account != "b" || one.Series[356].Requests != 1 {
		t.Errorf("b's series: %+v", one.Series[356])
	}
	// An hour later the old steps are gone, not summed into new ones.
	hour := later.Add(time.Hour)
	r.Observe(hour, "a", OK, time.Millisecond, 0)
	v = r.View(hour, "", 5*time.Minute)
	total := 0
	for _, p := range v.Series {
		total += p.Requests
	}
	if total != 1 {
		t.Errorf("%d requests in the ring an hour later, want 1", total)
	}
}

func TestAccountsAreBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	r := New(time.Second, 10, 4)
	for i := range 50 {
		r.Observe(now, fmt.Sprintf("acct-%d", i), OK, time.Millisecond, 0)
	}
	v := r.View(now, "", time.Second)
	if len(v.Accounts) != 5 || v.Accounts[0].Account != Other || v.Accounts[0].Requests != 46 {
		t.Fatalf("summaries %+v, want 4 accounts and (other) with the 46 others", v.Accounts)
	}
}

func BenchmarkObserve(b *testing.B) {
	r := New(10*time.Second, 360, 64)
	now := time.Now()
	for b.Loop() {
		r.Observe(now, "acct-1", OK, 120*time.Millisecond, 30*time.Millisecond)
	}
}

// Follow-ups and how many reused their session are counted per step, per
// account over the window, and for the whole gateway over the window; an
// older one falls out of the window.
func TestFollowUps(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	r := New(10*time.Second, 360, 3)
	for i := range 4 {
		r.FollowUp(start, "a", i > 0) // 3 of 4 reused
	}
	r.FollowUp(start, "b", false)
	r.FollowUp(start.Add(-10*time.Minute), "a", true) // before the window
	v := r.View(start, "", 5*time.Minute)
	if v.FollowUps != 5 || v.Reused != 3 {
		t.Errorf("gateway over the window: %d follow-ups, %d reused; want 5, 3", v.FollowUps, v.Reused)
	}
	if p := v.Series[359]; p.FollowUps != 5 || p.Reused != 3 {
		t.Errorf("the last step: %d follow-ups, %d reused; want 5, 3", p.FollowUps, p.Reused)
	}
	if a, b := v.Accounts[0], v.Accounts[1]; a.FollowUps != 4 || a.Reused != 3 || b.FollowUps != 1 || b.Reused != 0 {
		t.Errorf("accounts %+v, want a 4 follow-ups, 3 reused, and b 1, 0", v.Accounts)
	}
	if got := r.View(start, "a", time.Hour); got.FollowUps != 6 || got.Reused != 4 {
		t.Errorf("gateway over the hour: %d follow-ups, %d reused; want 6, 4", got.FollowUps, got.Reused)
	}
}
