package main

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// failoverTTL is POOLGATE_LEASE_TTL of the replicas startReplicas starts.
const failoverTTL = 3 * time.Second

// followUps counts what the follow-up turns of failoverLoad's conversations
// got: the upstream session continued, a new session given the whole
// transcript (a clean fall-back), or neither (a turn served from a session
// that lost the conversation without saying so).
type followUps struct {
	reused, fellBack, wrong atomic.Int32
}

// failoverLoad runs three-turn conversations through nginx until stop and
// counts failed requests (not a test failure: the failover window may cost
// some) and how each follow-up was served.
func (s *scale) failoverLoad(stop <-chan struct{}, failed *atomic.Int32, fu *followUps, wg *sync.WaitGroup) {
	s.converse(stop, wg, 3, "[[sim:whoami]] ", func() func(int, string, error) bool {
		var first string
		base := 0 // turns before the session that serves now
		return func(turn int, a string, err error) bool {
			if err != nil {
				failed.Add(1)
				s.t.Logf("request through nginx failed: %v", err)
				return false
			}
			w, ok := whoamiOf(a)
			switch {
			case !ok:
				fu.wrong.Add(1)
				s.t.Errorf("turn %d: not a whoami answer: %q", turn, a)
			case turn == 1:
				first = w.session
			case w.reply && w.session == first && w.turn == turn-base:
				fu.reused.Add(1)
			case !w.reply && w.sections > 1:
				fu.fellBack.Add(1)
				first, base = w.session, turn-1
			default:
				fu.wrong.Add(1)
				s.t.Errorf("follow-up turn %d: %+v, want session %s continued or a new one given the transcript", turn, w, first)
			}
			return true
		}
	})
}

// underLoad is a failover scenario's sampler of the replicas' pools and
// its conversations through nginx, with what they counted.
type underLoad struct {
	violations, failed atomic.Int32
	fu                 followUps
	// end stops both and waits for them (safe to call twice; also at the
	// test's cleanup).
	end func()
}

// startLoad starts the sampler and the conversations, and returns after two
// seconds of steady conversations.
func (s *scale) startLoad(t *testing.T) *underLoad {
	l := &underLoad{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	l.end = sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(l.end)
	s.sample(stop, &l.violations, &wg)
	s.failoverLoad(stop, &l.failed, &l.fu, &wg)
	time.Sleep(2 * time.Second)
	return l
}

// check fails t for any instant an account was served by two replicas
// (the sampler's overlapping serving stretches), and any follow-up that
// neither continued its session nor fell back to the whole transcript.
func (l *underLoad) check(t *testing.T) {
	t.Helper()
	if l.violations.Load() > 0 {
		t.Errorf("%d times an account was served by two replicas at one instant", l.violations.Load())
	}
	if l.fu.wrong.Load() > 0 {
		t.Errorf("%d follow-ups neither reused their session nor fell back to the transcript", l.fu.wrong.Load())
	}
}

// TestRedisFailover runs three replicas with four accounts on Redis as
// Sentinel runs it (a primary, one replica, three sentinels) and as a
// three-primary Cluster with a replica each, under steady conversations
// through nginx, then kills with SIGKILL the primary that holds the lease
// table. No account is ever ready on two replicas (sampled from their own
// pools), every account serves again within the failover plus one lease
// TTL (and a worker start), every follow-up reuses its session or falls
// back to the whole transcript, and the requests the failover costs are
// counted and bounded.
func TestRedisFailover(t *testing.T) {
	tests := []struct {
		name string
		// start returns the deployment, the server to kill, and a check
		// that the failover is done (another server serves the lease table).
		start func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool)
	}{
		{name: "sentinel", start: func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool) {
			set := testenv.RedisSentinel(t, time.Second)
			old := set.Primary.Addr()
			return set, set.Primary, func() bool {
				addr, err := set.PrimaryAddr(t)
				return err == nil && addr != old
			}
		}},
		{name: "cluster", start: func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool) {
			set := testenv.RedisCluster(t, 3, 1, 2*time.Second)
			const tableKey = "poolgate:{cluster}:leaseepoch"
			victim := set.PrimaryOf(t, tableKey)
			return set, victim, func() bool { return set.PrimaryOf(t, tableKey) != victim }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, victim, failedOver := tt.start(t)
			s := startReplicas(t, target)
			s.startNginx()
			s.waitSpread(60 * time.Second)

			l := s.startLoad(t)

			killedAt := time.Now()
			victim.Kill()
			testenv.WaitFor(t, 60*time.Second, "another Redis server to take over", failedOver)
			failover := time.Since(killedAt)
			// Spread again, and stable: within the failover, one lease TTL
			// and a worker start (generous on a loaded machine).
			s.waitSpread(failover + failoverTTL + 30*time.Second)
			serving := time.Since(killedAt)
			time.Sleep(2 * time.Second) // conversations on the new primary
			l.end()

			t.Logf("%s: failover %s, all accounts spread and serving %s after the kill; %d failed requests; follow-ups: %d reused, %d fell back",
				tt.name, failover.Round(100*time.Millisecond), serving.Round(100*time.Millisecond), l.failed.Load(),
				l.fu.reused.Load(), l.fu.fellBack.Load())
			l.check(t)
			if l.fu.reused.Load() == 0 {
				t.Errorf("no follow-up reused its session")
			}
			// Three clients, each with at most one request in flight: a
			// failed request costs a client at least a second, so the window
			// bounds them.
			if limit := int32(3 * (serving / time.Second)); l.failed.Load() > limit {
				t.Errorf("%d failed requests, want at most %d (three clients over %s)", l.failed.Load(), limit, serving.Round(time.Second))
			}
		})
	}
}

// TestRedisOutageLongerThanALease takes the one Redis away for longer than
// a lease TTL, so that every replica fences its accounts, and brings it
// back empty. No account is ever ready on two replicas, all are leased and
// serving again (their bundles put back by the replicas that had them), and
// no follow-up is served from a conversation Redis lost without falling back
// to its transcript.
func TestRedisOutageLongerThanALease(t *testing.T) {
	srv := testenv.Redis(t)
	s := startReplicas(t, srv)
	s.startNginx()
	s.waitSpread(60 * time.Second)

	l := s.startLoad(t)

	srv.Kill()
	testenv.WaitFor(t, 30*time.Second, "every account fenced while Redis is away", func() bool {
		return len(s.readyOn()) == 0
	})
	time.Sleep(failoverTTL - failoverTTL/5) // well past every lease's end
	srv.Restart()
	back := time.Now()
	s.waitSpread(failoverTTL + 60*time.Second)
	t.Logf("all accounts spread and serving %s after Redis came back empty; %d failed requests; follow-ups: %d reused, %d fell back",
		time.Since(back).Round(100*time.Millisecond), l.failed.Load(), l.fu.reused.Load(), l.fu.fellBack.Load())
	time.Sleep(2 * time.Second)
	l.end()
	l.check(t)
}

// whoamiOf parses a [[sim:whoami]] answer, like parseWhoami, for callers
// that count a bad answer instead of stopping the test.
func whoamiOf(s string) (whoami, bool) {
	m := whoamiRE.FindStringSubmatch(s)
	if m == nil {
		return whoami{}, false
	}
	turn, _ := strconv.Atoi(m[2])
	sections, _ := strconv.Atoi(m[4])
	return whoami{session: m[1], turn: turn, reply: m[3] == "true", sections: sections}, true
}
