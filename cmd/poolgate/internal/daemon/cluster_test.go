package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/deploy"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// scale is three replicas sharing four accounts and one Redis deployment
// (one server, a Sentinel set or a Cluster), behind Debian's nginx with
// deploy/nginx.conf.
type scale struct {
	t        *testing.T
	mu       sync.Mutex // guards replicas
	redis    testenv.RedisTarget
	ports    []int
	replicas []*daemontest.Daemon
	env      []string
	extra    func(i int) []string // replica i's variables on top of env
	nginxURL string
	nginxLog testenv.Buffer // nginx's access log
}

const clusterAccounts = `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw"},{"name":"acct-2","username":"u2","password":"pw"},` +
	`{"name":"acct-3","username":"u3","password":"pw"},{"name":"acct-4","username":"u4","password":"pw"}]`

func newScale(t *testing.T) *scale {
	s := startReplicas(t, testenv.Redis(t))
	s.startNginx()
	return s
}

// startReplicas seals the four accounts' bundles into target (one node
// logs them in), then starts the three replicas, which can only restore.
func startReplicas(t *testing.T, target testenv.RedisTarget) *scale {
	return startClusterOn(t, target, 3, nil)
}

// startCluster is startReplicas with n replicas on a redis-server of their
// own, each started with the variables env(i) returns on top.
func startCluster(t *testing.T, n int, env func(i int) []string) *scale {
	return startClusterOn(t, testenv.Redis(t), n, env)
}

// startClusterOn is startCluster on target.
func startClusterOn(t *testing.T, target testenv.RedisTarget, n int, env func(i int) []string) *scale {
	s := &scale{t: t, redis: target, extra: env}
	key := newBundleKey(t)
	redisEnv := []string{"POOLGATE_REDIS_URL=" + s.redis.URL(), "POOLGATE_REDIS_MODE=" + s.redis.Mode()}
	// The operator's first login: one node logs the accounts in (here the
	// simulator starts logged in) and seals their bundles into Redis.
	first := daemontest.StartDaemon(t, append(redisEnv, "POOLGATE_BUNDLE_KEY="+key, clusterAccounts,
		"POOLGATE_WORKER_ARGS=--logged-in")...)
	waitAllReady(t, first, 4, 20*time.Second)
	rc := target.Universal(t)
	testenv.WaitFor(t, 10*time.Second, "the four bundles saved in Redis", func() bool {
		for _, a := range []string{"acct-1", "acct-2", "acct-3", "acct-4"} {
			if rc.Exists(context.Background(), "poolgate:{bundle:"+a+"}").Val() != 1 {
				return false
			}
		}
		return true
	})
	first.Stop(t, 15*time.Second)

	// From now on no replica can log in: every start is from a bundle.
	s.env = append(redisEnv, "POOLGATE_BUNDLE_KEY="+key, clusterAccounts,
		"POOLGATE_AUTO_LOGIN=false", "POOLGATE_CLUSTER_TOKEN=ct", "POOLGATE_LEASE_TTL=3s",
		"POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_METRICS_PUBLIC=true")
	for range n {
		s.ports = append(s.ports, testenv.FreePort(t))
	}
	s.replicas = make([]*daemontest.Daemon, n)
	for i := range n {
		s.start(i)
	}
	return s
}

func (s *scale) start(i int) {
	addr := fmt.Sprintf("127.0.0.1:%d", s.ports[i])
	env := append(slices.Clone(s.env), "POOLGATE_LISTEN="+addr, "POOLGATE_ADVERTISE_URL=http://"+addr,
		fmt.Sprintf("POOLGATE_REPLICA_ID=r%d", i+1))
	if s.extra != nil {
		env = append(env, s.extra(i)...)
	}
	d := daemontest.StartDaemon(s.t, env...)
	s.mu.Lock()
	s.replicas[i] = d
	s.mu.Unlock()
}

// live returns the replicas whose process runs, by index.
func (s *scale) live() map[int]*daemontest.Daemon {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[int]*daemontest.Daemon{}
	for i, d := range s.replicas {
		if d == nil {
			continue
		}
		select {
		case <-d.Done():
		default:
			out[i] = d
		}
	}
	return out
}

func (s *scale) startNginx() {
	t := s.t
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, err := os.Stat(bin); err != nil {
			t.Fatal("nginx not found: install it with 'apt-get install nginx' or run 'make test'")
		}
	}
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	var ups []string
	for _, p := range s.ports {
		ups = append(ups, fmt.Sprintf("127.0.0.1:%d", p))
	}
	conf, err := deploy.NginxConfig(listen, ups)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-g", "daemon off; pid "+filepath.Join(dir, "nginx.pid")+";")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout = &s.nginxLog
	if out, err := exec.Command(bin, "-t", "-p", dir, "-c", path, "-g", "pid "+filepath.Join(dir, "nginx.pid")+";").CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	s.nginxURL = "http://" + listen
	testenv.WaitForNoError(t, 5*time.Second, "nginx to come up", func() error {
		resp, err := http.Get(s.nginxURL + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
}

// readyOn maps each account to the live replicas where it is ready.
func (s *scale) readyOn() map[string][]int {
	out := map[string][]int{}
	for i, d := range s.live() {
		resp, err := http.Get(d.URL + "/internal/pool")
		if err != nil {
			continue
		}
		var snap route.Snapshot
		_ = jsonDecode(resp, &snap)
		for _, in := range snap.Instances {
			if in.State == supervisor.StateReady {
				out[in.Name] = append(out[in.Name], i)
			}
		}
	}
	return out
}

// waitSpread waits until every account is ready on exactly one live
// replica, each live replica holds its fair share, and that stays so for a
// second (no hand-over still under way).
func (s *scale) waitSpread(within time.Duration) map[string][]int {
	s.t.Helper()
	var on map[string][]int
	var stableSince time.Time
	testenv.WaitForNoError(s.t, within, "the accounts spread over the live replicas", func() error {
		switch on = s.readyOn(); {
		case !s.fair(on):
			stableSince = time.Time{}
			return fmt.Errorf("ready on %v", on)
		case stableSince.IsZero():
			stableSince = time.Now()
		}
		if time.Since(stableSince) < time.Second {
			return fmt.Errorf("spread as %v for under a second", on)
		}
		return nil
	})
	return on
}

func (s *scale) fair(on map[string][]int) bool {
	if len(on) != 4 {
		return false
	}
	per := map[int]int{}
	for _, rs := range on {
		if len(rs) != 1 {
			return false
		}
		per[rs[0]]++
	}
	live := s.live()
	for i := range live {
		if per[i] < 1 || per[i] > (4+len(live)-1)/len(live) {
			return false
		}
	}
	return true
}

// talk says how converse's clients talk.
type talk struct {
	clients, turns int
	// pause is how long a client waits between the turns of a
	// conversation (none: back to back).
	pause  time.Duration
	prefix string
	// served, when not nil, counts the answers and their tokens.
	served *tally
}

// converse runs conversations of tk.turns turns (non-streaming) through
// nginx from tk.clients clients until stop. Each turn's prompt is tk.prefix
// and which client, conversation and turn (from 1) it is; a conversation's
// answers go to the check newCheck makes for it, in order, and a false
// from the check ends the conversation there.
func (s *scale) converse(stop <-chan struct{}, wg *sync.WaitGroup, tk talk,
	newCheck func() func(turn int, answer string, err error) bool) {
	for c := range tk.clients {
		wg.Go(func() {
			client := sdkURL(s.nginxURL)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+time.Duration(tk.turns)*tk.pause)
				conv, check := &conversation{client: client, served: tk.served}, newCheck()
				for turn := 1; turn <= tk.turns; turn++ {
					if turn > 1 && tk.pause > 0 {
						select {
						case <-stop:
						case <-time.After(tk.pause):
						}
					}
					a, err := conv.say(ctx, fmt.Sprintf("%sclient %d conv %d turn %d", tk.prefix, c, n, turn))
					if !check(turn, a, err) {
						break
					}
				}
				cancel()
			}
		})
	}
}

// load runs two-turn conversations through nginx until stop; every failed
// request counts and fails the test.
func (s *scale) load(stop <-chan struct{}, failed *atomic.Int32, wg *sync.WaitGroup) {
	s.converse(stop, wg, talk{clients: 3, turns: 2}, func() func(int, string, error) bool {
		return func(_ int, _ string, err error) bool {
			if err != nil {
				failed.Add(1)
				s.t.Errorf("request through nginx failed: %v", err)
			}
			return true
		}
	})
}

func TestScaleOut(t *testing.T) {
	s := newScale(t)
	var violations, failed atomic.Int32
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	s.sample(stopSampling, &violations, &sampler)
	defer func() {
		close(stopSampling)
		sampler.Wait()
	}()

	// Four accounts over three replicas: each holds one or two.
	s.waitSpread(30 * time.Second)

	// A conversation keeps its upstream session although nginx spreads the turns.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conv := &conversation{client: sdkURL(s.nginxURL)}
	var first whoami
	for turn := 1; turn <= 5; turn++ {
		a, err := conv.say(ctx, fmt.Sprintf("[[sim:whoami]] turn %d", turn))
		if err != nil {
			t.Fatal(err)
		}
		w := parseWhoami(t, a)
		if turn == 1 {
			first = w
		} else if !w.reply || w.session != first.session || w.turn != turn {
			t.Errorf("turn %d through nginx: %+v, want session %s continued", turn, w, first.session)
		}
	}

	// Kill the replica holding most; its accounts come back on the others
	// from their bundles (auto-login is off), and traffic keeps flowing.
	// The load stops before the test's clean-up takes nginx away, also when
	// a step below fails the test.
	stopLoad := make(chan struct{})
	var load sync.WaitGroup
	endLoad := sync.OnceFunc(func() {
		close(stopLoad)
		load.Wait()
	})
	defer endLoad()
	s.load(stopLoad, &failed, &load)
	on := s.waitSpread(10 * time.Second)
	victim := on["acct-1"][0]
	killedAt := time.Now()
	vd := s.live()[victim]
	_ = syscall.Kill(vd.Pid(), syscall.SIGKILL)
	<-vd.Done()
	s.waitSpread(20 * time.Second)
	t.Logf("accounts serving again %s after the kill", time.Since(killedAt).Round(100*time.Millisecond))

	// Restart it: it takes its share back, gracefully.
	s.start(victim)
	s.waitSpread(30 * time.Second)

	// Redis restarts (losing its data): replicas keep their accounts.
	srv := s.redis.(*testenv.RedisServer)
	srv.Kill()
	time.Sleep(500 * time.Millisecond)
	srv.Restart()
	time.Sleep(5 * time.Second)
	s.waitSpread(20 * time.Second)

	endLoad()
	if failed.Load() > 0 || violations.Load() > 0 {
		t.Fatalf("%d failed requests, %d times an account was served by two replicas at one instant", failed.Load(), violations.Load())
	}
	var cs cluster.Status
	if code := s.live()[0].GetJSON(t, "/internal/cluster", "", &cs); code != http.StatusOK || len(cs.Replicas) != 3 {
		t.Errorf("/internal/cluster: %d %+v", code, cs)
	}
}
