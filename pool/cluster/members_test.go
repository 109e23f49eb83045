package cluster

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// reconfigure applies the named accounts to r's supervisor, as a reload
// does: an account it runs already keeps its work dir, so it is unchanged.
func reconfigure(t *testing.T, r *replica, names ...string) supervisor.Changes {
	t.Helper()
	wcs := supervisortest.Configs(t, true, names...)
	drv := r.sup.Workers()[0].Driver() // every worker of the test has the same fake
	for i := range wcs {
		wcs[i].Driver = drv
		if w, ok := r.sup.Worker(wcs[i].Name); ok {
			wcs[i].WorkDir = w.WorkDir()
		}
	}
	ch, err := r.sup.Apply(wcs)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestClusterFollowsAReload: two replicas share acct-1 and acct-2, then
// both reload to acct-2 and acct-3. The holder of acct-1 drains it and
// releases its lease (no replica holds it after), acct-3 enters the lease
// competition and lands on one replica only, and the two replicas end with
// one account each. (Between the two reloads the replicas' lists differ, so
// acct-2 may be handed over: each computes its share from its own list.)
func TestClusterFollowsAReload(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeCluster()
		f := supervisortest.New()
		r1 := startReplica(t, store, f, "r1", "acct-1", "acct-2")
		r2 := startReplica(t, store, f, "r2", "acct-1", "acct-2")
		defer stopAll(r1, r2)
		time.Sleep(4 * balanceTTL)
		if len(r1.held()) != 1 || len(r2.held()) != 1 {
			t.Fatalf("before the reload r1 holds %v and r2 %v, want one each", r1.held(), r2.held())
		}

		for _, r := range []*replica{r1, r2} {
			ch := reconfigure(t, r, "acct-2", "acct-3")
			if !slices.Equal(ch.Added, []string{"acct-3"}) || !slices.Equal(ch.Removed, []string{"acct-1"}) || len(ch.Changed) != 0 {
				t.Fatalf("%s applied %+v, want acct-3 added and acct-1 removed", r.id, ch)
			}
			if r.pool.Serves("acct-3") && !slices.Contains(r.held(), "acct-3") {
				t.Errorf("%s serves acct-3 without its lease", r.id)
			}
		}
		for _, r := range []*replica{r1, r2} {
			if slices.Contains(r.held(), "acct-1") {
				t.Errorf("%s still holds the removed acct-1", r.id)
			}
		}
		store.mu.Lock()
		_, leased := store.live("acct-1")
		store.mu.Unlock()
		if leased {
			t.Error("acct-1's lease outlived its removal from every replica")
		}

		time.Sleep(4 * balanceTTL)
		for _, acct := range []string{"acct-2", "acct-3"} {
			holders := 0
			for _, r := range []*replica{r1, r2} {
				if slices.Contains(r.held(), acct) {
					holders++
					if !r.pool.Serves(acct) {
						t.Errorf("%s holds %s but does not serve it", r.id, acct)
					}
				}
			}
			if holders != 1 {
				t.Errorf("%s is held by %d replicas, want one (r1 %v, r2 %v)", acct, holders, r1.held(), r2.held())
			}
		}
		if len(r1.held()) != 1 || len(r2.held()) != 1 {
			t.Errorf("after the reload r1 holds %v and r2 %v, want one each", r1.held(), r2.held())
		}
	})
}
