package daemon

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/internal/agents"
	"github.com/poolgate/poolgate/internal/config"
)

// The pinned agents against two replicas sharing one Redis, behind a front
// that spreads their requests: the plain and tool turns alternate between
// the replicas, and the follow-up goes wholly to the replica that does not
// run the instance that served the tool turn, so the follow-up's turn must
// hop to the replica that holds its upstream session and continue it there.
func TestAgentsCluster(t *testing.T) {
	clients := agents.Clients()
	for _, c := range clients {
		if _, err := c.Path(); err != nil {
			t.Fatal(err)
		}
	}
	s := startCluster(t, 2, servingCluster)
	s.waitSpread(60 * time.Second)
	front := newSpreader(t, s)
	rec, err := agents.NewRecorder(httptest.NewServer(front).URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	hits := func() float64 {
		sum := 0.0
		for _, d := range s.live() {
			sum += scrape(t, d, "poolgate_session_cache_hits_total")
		}
		return sum
	}
	for _, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			front.pin(-1)
			runAgent(t, rec, proxy.URL, c, hits, func() { front.pin(front.away(t)) })
			for _, ex := range rec.Exchanges() {
				if ex.Client == c.Name && ex.Status != http.StatusOK {
					t.Errorf("%s %s (%s) was answered %d", ex.Method, ex.Path, ex.Scenario, ex.Status)
				}
			}
			logSessionLosses(t, s)
		})
	}
}

// servingCluster is the environment of a cluster test about serving, not
// failing over: the production lease TTL. startCluster's three-second lease
// suits the failover drills, but a replica that has not renewed for 2.4 s
// of it fences its accounts and stops their workers, with every upstream
// session on them, as it must. A busy machine starves a race-built replica
// that long now and then, most often while an agent CLI that takes seconds
// of CPU a turn (qwen-code) runs: its follow-up then found its session gone.
func servingCluster(int) []string {
	return []string{"POOLGATE_LEASE_TTL=" + config.Defaults().LeaseTTL.String()}
}

// sessionLoss matches the log lines that say why a conversation's upstream
// session was gone or out of reach: an account fenced or its worker
// restarted (sessions lost with the process), Redis out of reach (affinity
// kept only in one replica's memory), a worker that no longer had it.
var sessionLoss = regexp.MustCompile(`lease not renewed in time|lease lost to another replica|worker down, restarting|` +
	`health check failed|redis unavailable|session not found`)

// logSessionLosses logs, when t failed, the replicas' lines that explain a
// follow-up that did not continue its session.
func logSessionLosses(t *testing.T, s *scale) {
	t.Helper()
	if !t.Failed() {
		return
	}
	for i, d := range s.live() {
		for _, l := range strings.Split(d.Log(), "\n") {
			if sessionLoss.MatchString(l) {
				t.Logf("replica %d: %s", i+1, l)
			}
		}
	}
}

// spreader sends each request to one of the replicas: in turn, or all to
// the pinned one. It remembers the instance that served the last answer.
type spreader struct {
	s       *scale
	proxies []*httputil.ReverseProxy

	mu     sync.Mutex
	next   int
	pinned int // -1: in turn
	last   string
}

func newSpreader(t *testing.T, s *scale) *spreader {
	sp := &spreader{s: s, pinned: -1}
	for _, d := range s.replicas {
		u, err := url.Parse(d.URL)
		if err != nil {
			t.Fatal(err)
		}
		p := httputil.NewSingleHostReverseProxy(u)
		p.FlushInterval = -1
		p.ModifyResponse = func(r *http.Response) error {
			if in := r.Header.Get(handlers.InstanceHeader); in != "" {
				sp.mu.Lock()
				sp.last = in
				sp.mu.Unlock()
			}
			return nil
		}
		sp.proxies = append(sp.proxies, p)
	}
	return sp
}

func (sp *spreader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sp.mu.Lock()
	i := sp.pinned
	if i < 0 {
		i = sp.next % len(sp.proxies)
		sp.next++
	}
	sp.mu.Unlock()
	sp.proxies[i].ServeHTTP(w, r)
}

func (sp *spreader) pin(i int) {
	sp.mu.Lock()
	sp.pinned = i
	sp.mu.Unlock()
}

// away returns the replica that does not run the instance of the last
// answer.
func (sp *spreader) away(t *testing.T) int {
	t.Helper()
	sp.mu.Lock()
	last := sp.last
	sp.mu.Unlock()
	on := sp.s.readyOn()[last]
	if len(on) != 1 {
		t.Fatalf("the last answer's instance %q is ready on replicas %v, want one", last, on)
	}
	return 1 - on[0]
}
