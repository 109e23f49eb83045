package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// balanceTTL is the lease TTL of the field report: every replica ticks every
// 600 ms.
const balanceTTL = 3 * time.Second

var fourAccounts = []string{"acct-1", "acct-2", "acct-3", "acct-4"}

// replica is one Cluster over its own pool of fake workers; the replicas of
// a test share one store.
type replica struct {
	id      string
	sup     *supervisor.Supervisor
	pool    *route.Pool
	m       *metrics.Metrics
	cluster *Cluster
	logins  *supervisortest.Loginer
	cancel  context.CancelFunc
	done    chan struct{}
}

func startReplica(t *testing.T, store Store, f *supervisortest.Workers, id string, accounts ...string) *replica {
	m := newMetrics()
	p := route.New(route.Config{}, m, slog.New(slog.DiscardHandler))
	logins := &supervisortest.Loginer{}
	gate := NewLoginGate(logins)
	sup := supervisor.New(p.Watch(supervisor.Config{Loginer: gate}), supervisortest.Drive(f, supervisortest.Configs(t, true, accounts...)), f, m, slog.New(slog.DiscardHandler))
	c := New(Config{ID: id, URL: "http://" + id, LeaseTTL: balanceTTL, DrainTimeout: time.Second, Logins: gate},
		sup, p, store, m, slog.New(slog.DiscardHandler))
	r := &replica{id: id, sup: sup, pool: p, m: m, cluster: c, logins: logins, done: make(chan struct{})}
	sup.SubscribeMembers(c)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	sup.Start(ctx)
	go func() { c.Run(ctx); close(r.done) }()
	return r
}

// stop shuts the replica down as the daemon does: turns, workers, cluster loop,
// leases.
func (r *replica) stop() {
	r.pool.Shutdown(context.Background())
	r.sup.Shutdown()
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
	for _, name := range r.sup.Names() {
		if n := counter(t, r.m.Handovers, name); n > 0 {
			out[name] = int(n)
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
				store, f := newFakeCluster(), supervisortest.New()
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
				if acct := r2.held()[0]; !r2.pool.Serves(acct) {
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

// TestClusterFreshStartLogsInOnlyWhatItKeeps: a new cluster of three
// replicas whose accounts all need a login splits them 2-1-1 at once, with
// no hand-over, and each login is asked for only by the replica that keeps
// the account (a move would have cut it).
func TestClusterFreshStartLogsInOnlyWhatItKeeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, f := newFakeCluster(), supervisortest.New(fourAccounts...)
		store.closedUntil = time.Now().Add(balanceTTL) // a fresh Redis admits no owner for one TTL
		var rs []*replica
		for i, at := range []time.Duration{0, 150 * time.Millisecond, 250 * time.Millisecond} {
			time.Sleep(at)
			rs = append(rs, startReplica(t, store, f, fmt.Sprintf("r%d", i+1), fourAccounts...))
		}
		defer stopAll(rs...)
		time.Sleep(10 * time.Second)
		var sizes []int
		for _, r := range rs {
			sizes = append(sizes, len(r.held()))
			for name := range r.logins.Asked() {
				if !slices.Contains(r.held(), name) {
					t.Errorf("%s asked for a login of %s, which it does not keep (holds %v)", r.id, name, r.held())
				}
			}
			for _, name := range r.held() {
				if _, ok := r.logins.Asked()[name]; !ok {
					t.Errorf("%s holds %s, logged out, and asked for no login", r.id, name)
				}
			}
		}
		slices.Sort(sizes)
		if !slices.Equal(sizes, []int{1, 1, 2}) {
			t.Errorf("accounts per replica %v, want 1, 1, 2", sizes)
		}
		if n := totalHandOvers(t, rs...); n != 0 {
			t.Errorf("%d hand-overs in a fresh cluster, want none", n)
		}
	})
}

// TestClusterHandsOverTheAccountThatNeedsNoLogin: when a replica joins, the
// giver hands over a ready account (its bundle moves with it) rather than
// one whose login is under way, and that login goes on.
func TestClusterHandsOverTheAccountThatNeedsNoLogin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, f := newFakeCluster(), supervisortest.New("acct-1")
		r1 := startReplica(t, store, f, "r1", "acct-1", "acct-2")
		time.Sleep(time.Second)
		login, ok := r1.logins.Asked()["acct-1"]
		if !ok || len(r1.held()) != 2 {
			t.Fatalf("r1 holds %v and asked for logins of %v; want both accounts and acct-1's login", r1.held(), r1.logins.Names())
		}
		r2 := startReplica(t, store, f, "r2", "acct-1", "acct-2")
		defer stopAll(r1, r2)
		time.Sleep(3 * time.Second)
		if got := r1.handedOver(t); len(got) != 1 || got["acct-2"] != 1 {
			t.Errorf("r1 handed over %v, want acct-2 once", got)
		}
		if !slices.Equal(r1.held(), []string{"acct-1"}) || !slices.Equal(r2.held(), []string{"acct-2"}) {
			t.Errorf("r1 holds %v and r2 %v, want acct-1 and acct-2", r1.held(), r2.held())
		}
		select {
		case <-login.Released:
			t.Error("the hand-over ended acct-1's worker run, cutting its login")
		default:
		}
	})
}

// TestClusterHoldsLoginsWhileItOwesAnAccount: a replica that has an account
// to give away starts no login until the hand-over is done, since the
// account it logs in might be the one it gives.
func TestClusterHoldsLoginsWhileItOwesAnAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, f := newFakeCluster(), supervisortest.New()
		r1 := startReplica(t, store, f, "r1", "acct-1", "acct-2") // ticks at whole multiples of 600 ms
		time.Sleep(time.Second + 100*time.Millisecond)
		r2 := startReplica(t, store, f, "r2", "acct-1", "acct-2")
		defer stopAll(r1, r2)
		// r1 finds r2 short at 1.2 s and hands acct-1 over; acct-2 logs out
		// meanwhile, and r1's health checks find it so before r1 settles at
		// its next tick (1.8 s).
		time.Sleep(150 * time.Millisecond)
		f.SetLoggedIn("acct-2", false)
		time.Sleep(400 * time.Millisecond) // 1.75 s
		if got := r1.handedOver(t); got["acct-1"] != 1 {
			t.Fatalf("r1 handed over %v, want acct-1", got)
		}
		if asked := r1.logins.Names(); len(asked) != 0 {
			t.Errorf("r1 asked for logins of %v while it owed an account", asked)
		}
		time.Sleep(time.Second)
		if asked := r1.logins.Names(); !slices.Equal(asked, []string{"acct-2"}) || !slices.Equal(r1.held(), []string{"acct-2"}) {
			t.Errorf("after the hand-over r1 holds %v and asked for logins of %v; want acct-2 logged in", r1.held(), asked)
		}
	})
}
