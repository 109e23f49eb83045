package pool

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"testing/synctest"
	"time"
)

// balanceTTL is the lease TTL of the field report: every replica ticks every
// 600 ms.
const balanceTTL = 3 * time.Second

var fourAccounts = []string{"acct-1", "acct-2", "acct-3", "acct-4"}

// replica is one Cluster over its own pool of fake workers; the replicas of
// a test share one store.
type replica struct {
	id      string
	pool    *Pool
	cluster *Cluster
	cancel  context.CancelFunc
	done    chan struct{}
}

func startReplica(t *testing.T, store ClusterStore, f *fakeWorkers, id string, accounts ...string) *replica {
	p, _ := fakePool(t, f, true, accounts...)
	c := NewCluster(ClusterConfig{ID: id, URL: "http://" + id, LeaseTTL: balanceTTL, DrainTimeout: time.Second},
		p, store, p.log)
	r := &replica{id: id, pool: p, cluster: c, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	p.Start(ctx)
	go func() { c.Run(ctx); close(r.done) }()
	return r
}

// stop shuts the replica down as main does: workers, cluster loop, leases.
func (r *replica) stop() {
	r.pool.Shutdown(context.Background())
	r.cancel()
	<-r.done
	r.cluster.Leave(context.Background())
}

func stopAll(rs ...*replica) {
	for _, r := range rs {
		r.stop()
	}
}

// held returns the accounts the replica holds a lease for, sorted.
func (r *replica) held() []string {
	var out []string
	for name := range r.cluster.Status().Held {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// handedOver returns how many times the replica handed each account over.
func (r *replica) handedOver(t *testing.T) map[string]int {
	out := map[string]int{}
	for _, w := range r.pool.Workers() {
		if n := counter(t, r.pool.metrics.Handovers, w.Name()); n > 0 {
			out[w.Name()] = int(n)
		}
	}
	return out
}

func totalHandOvers(t *testing.T, rs ...*replica) int {
	n := 0
	for _, r := range rs {
		for _, c := range r.handedOver(t) {
			n += c
		}
	}
	return n
}

// TestClusterRejoinLandsOnTheShortReplica is the rejoin of the field report
// with the phase between ticks fixed: r1 and r3 hold two accounts each, r2
// joins with none, r1 hands one over, and r2 ticks at a given offset after
// r1. The first case is the one that looped: r2 reads the table just after
// r1's decision, before the release, and r1 reached the free account first
// on its next tick. Whatever the offset, the account must land on r2 by r2's
// second tick after the decision, and stay there.
func TestClusterRejoinLandsOnTheShortReplica(t *testing.T) {
	tests := []struct {
		name string
		give time.Duration // r2's ticks after r1's
	}{
		{"just after the giver, before the release", 22 * time.Millisecond},
		{"after the release", 300 * time.Millisecond},
		{"just before the giver's next tick", 590 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, f := newFakeCluster(), newFakeWorkers()
				r1 := startReplica(t, store, f, "r1", fourAccounts...) // ticks at whole multiples of 600 ms
				time.Sleep(time.Millisecond)
				r3 := startReplica(t, store, f, "r3", fourAccounts...)
				time.Sleep(3*time.Second - time.Millisecond + tt.give)
				if len(r1.held()) != 2 || len(r3.held()) != 2 {
					t.Fatalf("before the rejoin r1 holds %v, r3 %v; want two each", r1.held(), r3.held())
				}
				before := totalHandOvers(t, r1, r3)
				r2 := startReplica(t, store, f, "r2", fourAccounts...)
				defer stopAll(r1, r2, r3)

				for totalHandOvers(t, r1, r3) == before {
					time.Sleep(time.Millisecond)
				}
				time.Sleep(2*balanceTTL/5 + time.Millisecond) // two ticks of r2's
				given := r1.handedOver(t)
				if len(r2.held()) != 1 || given[r2.held()[0]] == 0 {
					t.Fatalf("two ticks after the hand-over r2 holds %v, want the account r1 gave (%v); r1 %v, r3 %v",
						r2.held(), given, r1.held(), r3.held())
				}
				if acct := r2.held()[0]; !usableNow(r2.pool, acct) {
					t.Errorf("%s is not serving on r2", acct)
				}
				spread := [][]string{r1.held(), r2.held(), r3.held()}
				time.Sleep(10 * balanceTTL / 5)
				if got := totalHandOvers(t, r1, r2, r3) - before; got != 1 {
					t.Errorf("%d hand-overs after the rejoin, want 1", got)
				}
				if now := [][]string{r1.held(), r2.held(), r3.held()}; fmt.Sprint(now) != fmt.Sprint(spread) {
					t.Errorf("holdings moved from %v to %v after the spread", spread, now)
				}
			})
		})
	}
}
