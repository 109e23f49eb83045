package daemon

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// The sampler of "never two owners". Reading the replicas' pools one after
// the other cannot tell on its own whether an account was served by two at
// one instant: an account that moves from one replica to another between
// the two reads shows on both, and on a loaded machine a read takes long.
// So each replica says itself, in its /internal/pool, at which instant the
// snapshot was taken (at) and, for each account it serves (takes turns, or
// could, or has one running), since when it has served it without a break.
// A replica that said "serving since s" in a snapshot taken at a served
// throughout [s, a]; two such stretches of one account on two replicas that
// overlap are an instant it was served twice. The clocks are one: the
// replicas run on the test's machine.

// stretch is one replica's serving of one account without a break: from
// since to at least seen, the newest snapshot that still said so.
type stretch struct {
	replica     int
	since, seen time.Time
}

// overlap is two stretches of one account that overlap.
type overlap struct {
	account string
	a, b    stretch
}

func (o overlap) String() string {
	from, to := maxTime(o.a.since, o.b.since), minTime(o.a.seen, o.b.seen)
	return fmt.Sprintf("%s served on replicas %d and %d at once for %s from %s (replica %d serving since %s, seen at %s; replica %d since %s, seen at %s)",
		o.account, o.a.replica, o.b.replica, to.Sub(from), from.Format(time.StampMicro),
		o.a.replica, o.a.since.Format(time.StampMicro), o.a.seen.Format(time.StampMicro),
		o.b.replica, o.b.since.Format(time.StampMicro), o.b.seen.Format(time.StampMicro))
}

// stretches collects what the replicas said about their serving.
type stretches struct {
	by map[string][]stretch // by account
}

// add takes replica's word that it served account from since until at,
// and returns the stretches of other replicas it overlaps.
func (s *stretches) add(account string, replica int, since, at time.Time) []overlap {
	if s.by == nil {
		s.by = map[string][]stretch{}
	}
	var out []overlap
	mine := -1
	for i, o := range s.by[account] {
		switch {
		case o.replica == replica && o.since.Equal(since):
			mine = i
		case o.replica != replica && maxTime(o.since, since).Before(minTime(o.seen, at)):
			out = append(out, overlap{account: account, a: o, b: stretch{replica, since, at}})
		}
	}
	if mine < 0 {
		s.by[account] = append(s.by[account], stretch{replica: replica, since: since, seen: at})
	} else if at.After(s.by[account][mine].seen) {
		s.by[account][mine].seen = at
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// pools reads every live replica's /internal/pool, by replica.
func (s *scale) pools() map[int]route.Snapshot {
	out := map[int]route.Snapshot{}
	client := &http.Client{Timeout: 5 * time.Second}
	for i, d := range s.live() {
		resp, err := client.Get(d.URL + "/internal/pool")
		if err != nil {
			continue
		}
		var snap route.Snapshot
		if err := jsonDecode(resp, &snap); err == nil {
			out[i] = snap
		}
	}
	return out
}

// sample checks, 20 times a second until stop, that no account is ever
// served by two replicas at one instant, from the replicas' own serving
// stretches. It also counts the reads that would have said so from the
// workers' states alone (an account ready on two replicas in one round of
// reads), and logs that count at the end: those are not violations.
func (s *scale) sample(stop <-chan struct{}, violations *atomic.Int32, wg *sync.WaitGroup) {
	wg.Go(func() {
		var seen stretches
		rounds, readyTwice := 0, 0
		defer func() {
			s.t.Logf("sampler: %d rounds; %d saw an account ready on two replicas as read one after the other, %d overlapping serving stretches",
				rounds, readyTwice, violations.Load())
		}()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			rounds++
			ready := map[string]int{}
			for i, snap := range s.pools() {
				for _, in := range snap.Instances {
					if in.State == supervisor.StateReady {
						ready[in.Name]++
					}
					if !in.Serving || in.ServingSince == nil {
						continue
					}
					for _, o := range seen.add(in.Name, i, *in.ServingSince, snap.At) {
						violations.Add(1)
						s.t.Errorf("%s", o)
					}
				}
			}
			for _, n := range ready {
				if n > 1 {
					readyTwice++
				}
			}
		}
	})
}

// The check itself: stretches overlap when both replicas served at one
// instant, whatever order the snapshots were read in; a stretch that ended
// before the other began (the account moved) is no overlap, however late
// its last snapshot was read.
func TestServingStretchesOverlap(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type report struct {
		replica     int
		since, seen int // ms
	}
	tests := []struct {
		name string
		give []report
		want int // overlaps found
	}{
		{name: "moved: the first stretch ended before the second began", give: []report{{1, 0, 900}, {2, 1000, 1100}}},
		{name: "moved, the second read first", give: []report{{2, 1000, 1100}, {1, 0, 900}}},
		{name: "moved between two reads of one round", give: []report{{1, 0, 950}, {2, 980, 990}}},
		{name: "served at once", give: []report{{1, 0, 1050}, {2, 1000, 1100}}, want: 1},
		{name: "served at once, seen in later snapshots", give: []report{{1, 0, 900}, {2, 1000, 1100}, {1, 0, 1200}}, want: 1},
		{name: "one replica, a new stretch after a break", give: []report{{1, 0, 900}, {1, 1000, 1100}}},
		{name: "a third replica while two hold one stretch each", give: []report{{1, 0, 500}, {2, 600, 900}, {3, 800, 1000}}, want: 1},
	}
	for _, tt := range tests {
		var s stretches
		got := 0
		for _, r := range tt.give {
			got += len(s.add("acct-1", r.replica, at(r.since), at(r.seen)))
		}
		if got != tt.want {
			t.Errorf("%s: %d overlaps, want %d", tt.name, got, tt.want)
		}
	}
}
