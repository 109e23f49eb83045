package daemon

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// rejoinCycles is how many kill / rejoin cycles TestRejoinSoak runs; raise
// it for a longer soak (go test -run TestRejoinSoak -args -rejoin-cycles=50).
var rejoinCycles = flag.Int("rejoin-cycles", 20, "kill / rejoin cycles of TestRejoinSoak")

// soakTTL is the replicas' POOLGATE_LEASE_TTL (startReplicas): each ticks
// every 600 ms.
const soakTTL = 3 * time.Second

// TestRejoinSoak takes one replica of three down (SIGKILL, or SIGTERM every
// other cycle), waits until the two others serve all four accounts, and
// starts it again with a fresh data dir and id, at a random phase to the
// others' ticks. Every cycle must end spread (each replica
// holds one or two accounts, each account ready on one replica) within TTL
// + 2 s of the rejoin, still be spread two ticks later, and have handed no
// account over more than once. No account may be served by two replicas at
// one instant meanwhile (the sampler's serving stretches).
func TestRejoinSoak(t *testing.T) {
	s := startReplicas(t, testenv.Redis(t))
	s.waitSpread(30 * time.Second)
	var violations atomic.Int32
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	s.sample(stop, &violations, &sampler)
	defer func() {
		close(stop)
		sampler.Wait()
		if violations.Load() > 0 {
			t.Errorf("%d times an account was served by two replicas at one instant", violations.Load())
		}
	}()
	var stats soakStats
	for cycle := 1; cycle <= *rejoinCycles; cycle++ {
		victim, graceful := cycle%3, cycle%2 == 0
		s.takeDown(victim, graceful)
		if _, on := s.untilSpread(soakTTL + 10*time.Second); on == nil {
			t.Fatalf("cycle %d: the survivors did not take r%d's accounts over: %v", cycle, victim+1, s.readyOn())
		}
		// The survivors' ticks set when the takeover ends: wait a random
		// part of a tick so that the rejoined replica's ticks fall at any
		// phase to theirs.
		time.Sleep(rand.N(soakTTL / 5))
		before := s.handovers()
		s.start(victim)
		took, on := s.untilSpread(soakTTL + 2*time.Second)
		if on == nil {
			t.Fatalf("cycle %d: not spread within %s of r%d's rejoin: ready on %v, hand-overs since %v",
				cycle, soakTTL+2*time.Second, victim+1, s.readyOn(), since(s.handovers(), before))
		}
		time.Sleep(2 * soakTTL / 5)
		moved := since(s.handovers(), before)
		if now := s.readyOn(); !s.fair(now) {
			t.Fatalf("cycle %d: spread %v two ticks later became %v (hand-overs %v)", cycle, on, now, moved)
		}
		for acct, n := range moved {
			if n > 1 {
				t.Fatalf("cycle %d: %s handed over %d times after r%d's rejoin", cycle, acct, n, victim+1)
			}
		}
		stats.add(took, moved)
		t.Logf("cycle %d: r%d back (taken down with %s), spread after %s, hand-overs %v",
			cycle, victim+1, map[bool]string{true: "SIGTERM", false: "SIGKILL"}[graceful], took.Round(10*time.Millisecond), moved)
	}
	t.Log(stats)
}

// takeDown stops replica i: gracefully (it releases its leases) or killed
// (its leases run out).
func (s *scale) takeDown(i int, graceful bool) {
	d := s.live()[i]
	if graceful {
		d.Stop(s.t, 15*time.Second)
		return
	}
	_ = syscall.Kill(d.Pid(), syscall.SIGKILL)
	<-d.Done()
}

// untilSpread waits, up to within, until the accounts are spread over the
// live replicas (fair), and returns how long that took and where each
// account is ready; nil when time ran out.
func (s *scale) untilSpread(within time.Duration) (time.Duration, map[string][]int) {
	start := time.Now()
	for {
		if on := s.readyOn(); s.fair(on) {
			return time.Since(start), on
		}
		if time.Since(start) > within {
			return within, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// handovers sums poolgate_cluster_handovers_total per account over the live
// replicas (accounts never handed over are left out).
func (s *scale) handovers() map[string]int {
	out := map[string]int{}
	for _, d := range s.live() {
		resp, err := http.Get(d.URL + "/metrics")
		if err != nil {
			s.t.Fatalf("metrics of %s: %v", d.URL, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			rest, ok := strings.CutPrefix(sc.Text(), `poolgate_cluster_handovers_total{account="`)
			if !ok {
				continue
			}
			acct, val, _ := strings.Cut(rest, `"} `)
			if n, _ := strconv.ParseFloat(val, 64); n > 0 {
				out[acct] += int(n)
			}
		}
		resp.Body.Close()
	}
	return out
}

// since returns the counts that grew from before to now.
func since(now, before map[string]int) map[string]int {
	out := map[string]int{}
	for acct, n := range now {
		if d := n - before[acct]; d > 0 {
			out[acct] = d
		}
	}
	return out
}

// soakStats sums up the cycles of a soak for the log.
type soakStats struct {
	took      []time.Duration
	handOvers map[int]int // hand-overs in a cycle -> cycles
}

func (st *soakStats) add(took time.Duration, moved map[string]int) {
	st.took = append(st.took, took)
	n := 0
	for _, m := range moved {
		n += m
	}
	if st.handOvers == nil {
		st.handOvers = map[int]int{}
	}
	st.handOvers[n]++
}

func (st soakStats) String() string {
	if len(st.took) == 0 {
		return "no cycles"
	}
	sorted := slices.Sorted(slices.Values(st.took))
	var sum time.Duration
	for _, d := range sorted {
		sum += d
	}
	var per []string
	for _, n := range slices.Sorted(maps.Keys(st.handOvers)) {
		per = append(per, fmt.Sprintf("%d cycles with %d", st.handOvers[n], n))
	}
	r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
	return fmt.Sprintf("%d cycles: spread after a rejoin in %s mean, %s median, %s max; hand-overs per cycle: %s",
		len(sorted), r(sum/time.Duration(len(sorted))), r(sorted[len(sorted)/2]), r(sorted[len(sorted)-1]),
		strings.Join(per, ", "))
}
