package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// TestClusterFreshStartLogsInOnce starts a new cluster of three replicas
// whose four accounts all need a login (no bundle yet), with real Chromium.
// The replicas split the accounts once, 2-1-1, so no hand-over cuts a login
// that just started; every account is logged in once, by the replica that
// keeps it, and no attempt fails.
func TestClusterFreshStartLogsInOnce(t *testing.T) {
	s := &scale{t: t, redis: testenv.Redis(t)}
	s.env = []string{"POOLGATE_REDIS_URL=" + s.redis.URL(), "POOLGATE_REDIS_MODE=" + s.redis.Mode(), "POOLGATE_BUNDLE_KEY=" + newBundleKey(t), clusterAccounts,
		"POOLGATE_CLUSTER_TOKEN=ct", "POOLGATE_LEASE_TTL=5s", "POOLGATE_HEALTH_INTERVAL=300ms",
		"POOLGATE_METRICS_PUBLIC=true"}
	for range 3 {
		s.ports = append(s.ports, testenv.FreePort(t))
	}
	// A fresh Redis admits no owner for one TTL after the first replica's
	// first tick: all three register before (5 s leaves room on a busy
	// machine).
	s.replicas = make([]*daemontest.Daemon, 3)
	for i := range 3 {
		s.start(i)
	}
	if _, on := s.untilSpread(90 * time.Second); on == nil {
		t.Fatalf("accounts not logged in and spread within 90s: ready on %v", s.readyOn())
	}
	if moved := s.handovers(); len(moved) > 0 {
		t.Errorf("hand-overs in a new cluster: %v, want none", moved)
	}
	var sizes []int
	for i, d := range s.live() {
		// The worker confirmed each login: the runner records it a moment later.
		var st loginStatus
		testenv.WaitFor(t, 10*time.Second, "logins recorded", func() bool {
			d.GetJSON(t, "/internal/auto-login/status", "", &st)
			for _, in := range st.Instances {
				if in.State == "running" {
					return false
				}
			}
			return true
		})
		// Every account is listed; those this replica never logged in are
		// idle.
		logins := 0
		for _, in := range st.Instances {
			switch {
			case in.State == "idle" && in.Attempts == 0:
			case in.State != "succeeded" || in.Attempts != 1:
				t.Errorf("r%d: login of %s %s after %d attempts, want one success or none", i+1, in.Name, in.State, in.Attempts)
			default:
				logins++
			}
		}
		if n := scrape(t, d, `poolgate_login_attempts_total{result="failure"}`); n != 0 {
			t.Errorf("r%d counted %v failed login attempts, want none", i+1, n)
		}
		sizes = append(sizes, logins)
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 1, 2}) {
		t.Errorf("logins per replica %v, want 1, 1, 2", sizes)
	}
}
