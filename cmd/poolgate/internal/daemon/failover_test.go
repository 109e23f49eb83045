package daemon

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/internal/usage"
)

// failoverTTL is POOLGATE_LEASE_TTL of the replicas startReplicas starts.
const failoverTTL = 3 * time.Second

// followUps counts what the follow-up turns of failoverLoad's conversations
// got: the upstream session continued, a new session given the whole
// transcript (a clean fall-back), or neither (a turn served from a session
// that lost the conversation without saying so). Of those sent once the
// stores had recovered from the failover it counts how many there were,
// how many did not continue their session, and how many were of
// conversations begun before the kill (which went on through the outage).
type followUps struct {
	reused, fellBack, wrong    atomic.Int32
	after, afterLost, straddle atomic.Int32
	// resumed counts the paced conversations' first turns after their
	// wait for the stores (failoverLoad).
	resumed atomic.Int32
}

// underLoad is a failover scenario's sampler of the replicas' pools and
// its conversations through nginx, with what they counted.
type underLoad struct {
	violations, failed atomic.Int32
	fu                 followUps
	served             tally
	// killed and recovered are when the primary was killed and when the
	// stores had recovered (Unix ns, 0 before).
	killed, recovered atomic.Int64
	// end stops both and waits for them (safe to call twice; also at the
	// test's cleanup).
	end func()
}

// failoverLoad runs conversations through nginx until stop and counts, in
// l, failed requests (not a test failure: the failover window may cost
// some), how each follow-up was served, and the answers and their tokens.
// Three clients hold six-turn conversations back to back. With paced, six
// more hold twenty-turn ones with a pause between the turns, and once a
// turn sent after the kill is answered (served while the stores were
// degraded, or just after) they wait for the stores to recover before the
// next: that follow-up is the first after the failover of a conversation
// that went on during it, the one that lost its session when what was kept
// in process during the outage was not written back.
func (s *scale) failoverLoad(stop <-chan struct{}, l *underLoad, paced bool, wg *sync.WaitGroup) {
	s.converse(stop, wg, talk{clients: 3, turns: 6, prefix: "[[sim:whoami]] ", served: &l.served}, s.followUpCheck(l, nil))
	if paced {
		s.converse(stop, wg, talk{clients: 6, turns: 20, pause: 500 * time.Millisecond, prefix: "[[sim:whoami]] paced ",
			served: &l.served}, s.followUpCheck(l, stop))
	}
}

// followUpCheck is failoverLoad's check of each conversation's answers.
// With hold (the test's stop), a conversation whose turn went out after
// the kill waits, before its next turn, until the stores recovered.
func (s *scale) followUpCheck(l *underLoad, hold <-chan struct{}) func() func(int, string, error) bool {
	fu := &l.fu
	return func() func(int, string, error) bool {
		var first string
		base := 0            // turns before the session that serves now
		begun := time.Now()  // the conversation
		sentAt := time.Now() // when the turn being checked went out, or a little before
		waited := false      // the turn being checked went out after a wait for the stores
		return func(turn int, a string, err error) bool {
			defer func() { sentAt = time.Now() }() // the next turn goes out now (or after the pause)
			if err != nil {
				l.failed.Add(1)
				s.t.Logf("request through nginx failed: %v", err)
				return false
			}
			if waited {
				fu.resumed.Add(1)
				waited = false
			}
			w, ok := whoamiOf(a)
			recovered := l.recovered.Load()
			after := turn > 1 && recovered != 0 && sentAt.UnixNano() > recovered
			if after {
				fu.after.Add(1)
				if k := l.killed.Load(); k != 0 && begun.UnixNano() < k {
					fu.straddle.Add(1)
				}
			}
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
				if after {
					fu.afterLost.Add(1)
					s.t.Logf("follow-up turn %d sent %s after the stores recovered started session %s over, want session %s continued",
						turn, sentAt.Sub(time.Unix(0, recovered)).Round(time.Millisecond), w.session, first)
				}
				first, base = w.session, turn-1
			default:
				fu.wrong.Add(1)
				s.t.Errorf("follow-up turn %d: %+v, want session %s continued or a new one given the transcript", turn, w, first)
			}
			if k := l.killed.Load(); hold != nil && k != 0 && recovered == 0 && sentAt.UnixNano() > k {
				for l.recovered.Load() == 0 {
					select {
					case <-hold:
						return false
					case <-time.After(20 * time.Millisecond):
					}
				}
				waited = true
			}
			return true
		}
	}
}

// startLoad starts the sampler and the conversations (failoverLoad's, with
// the paced ones or without), and returns after two seconds of steady
// conversations.
func (s *scale) startLoad(t *testing.T, paced bool) *underLoad {
	l := &underLoad{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	l.end = sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(l.end)
	s.sample(stop, &l.violations, &wg)
	s.failoverLoad(stop, l, paced, &wg)
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

// waitRecovered waits until every live replica's stores are back on Redis
// with nothing of the outage left to write back (poolgate_redis_up 1,
// poolgate_affinity_held 0) and returns when that was seen.
func (s *scale) waitRecovered(within time.Duration) time.Time {
	s.t.Helper()
	testenv.WaitForNoError(s.t, within, "every replica's stores back on Redis, the affinity kept meanwhile written back", func() error {
		for i, d := range s.live() {
			if up, held := scrape(s.t, d, "poolgate_redis_up"), scrape(s.t, d, "poolgate_affinity_held"); up != 1 || held != 0 {
				return fmt.Errorf("replica %d: redis_up %v, affinity_held %v", i, up, held)
			}
		}
		return nil
	})
	return time.Now()
}

// checkUsage waits until the usage the replicas recorded in Redis is
// exactly what the clients were served: the answered turns (requests less
// errors) and their tokens, with no more errors than the clients saw.
func (s *scale) checkUsage(l *underLoad) {
	s.t.Helper()
	want := usage.Totals{Requests: l.served.turns.Load(), InputTokens: l.served.input.Load(), OutputTokens: l.served.output.Load()}
	var got usage.Totals
	testenv.WaitForNoError(s.t, 60*time.Second, "the usage in Redis to add up to the turns served", func() error {
		var u admin.UsageAnswer
		for _, d := range s.live() {
			if code := d.GetJSON(s.t, "/internal/usage", "", &u); code != http.StatusOK {
				return fmt.Errorf("/internal/usage: %d", code)
			}
			break
		}
		got = u.Totals
		if served := (usage.Totals{Requests: got.Requests - got.Errors, InputTokens: got.InputTokens,
			OutputTokens: got.OutputTokens}); served != want {
			return fmt.Errorf("usage of the answered turns %+v, want %+v", served, want)
		}
		return nil
	})
	// nginx tries a request that a replica answered 502 or 503 once more
	// on another: the replica that refused it counts an error the client
	// never saw.
	logged, retried := s.nginxRetried()
	if logged < int(want.Requests) {
		s.t.Errorf("nginx's access log shows %d requests with their replicas' statuses, want at least the %d turns served",
			logged, want.Requests)
	}
	if got.Errors > int64(l.failed.Load())+int64(retried) {
		s.t.Errorf("usage counts %d errors, the clients saw %d failed requests and nginx retried %d",
			got.Errors, l.failed.Load(), retried)
	}
	s.t.Logf("usage: %d requests, %d errors, %d+%d tokens; the clients were answered %d turns and saw %d failures; nginx retried %d",
		got.Requests, got.Errors, got.InputTokens, got.OutputTokens, want.Requests, l.failed.Load(), retried)
}

// upstreamStatus is the ust field of deploy/nginx.conf's access log: the
// status of each replica a request was sent to, in order ("503, 200").
var upstreamStatus = regexp.MustCompile(`ust="([^"]*)"`)

// nginxRetried counts the requests nginx's access log shows, and the
// answers of 400 or more a replica gave before nginx sent the request on
// to another.
func (s *scale) nginxRetried() (logged, retried int) {
	lines := upstreamStatus.FindAllStringSubmatch(s.nginxLog.String(), -1)
	for _, m := range lines {
		tries := strings.Split(m[1], ", ")
		for _, st := range tries[:len(tries)-1] {
			if code, err := strconv.Atoi(strings.TrimSpace(st)); err == nil && code >= 400 {
				retried++
			}
		}
	}
	return len(lines), retried
}

// TestRedisFailover runs three replicas with four accounts on Redis as
// Sentinel runs it (a primary, one replica, three sentinels) and as a
// three-primary Cluster with a replica each, under steady six-turn
// conversations through nginx, then kills with SIGKILL the primary that
// holds the lease table. No account is ever ready on two replicas (sampled
// from their own pools), every account serves again within the failover
// plus one lease TTL (and a worker start), every follow-up reuses its
// session or falls back to the whole transcript, the requests the failover
// costs are counted and bounded, and the usage Redis ends with is exactly
// what the clients were served (nothing recorded during the failover is
// lost or counted twice).
//
// The Sentinel set runs the default lease TTL, which outlasts the
// failover: no worker stops, and every follow-up sent once the stores
// have recovered continues its upstream session, also those of
// conversations that went on while Redis was away (their affinity, kept in
// process, is written back). The Cluster runs a 3 s TTL, which the
// failover outlasts: accounts are fenced and move.
func TestRedisFailover(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration
		// keepsSessions: no worker stops, so no follow-up after the
		// failover may lose its session.
		keepsSessions bool
		// start returns the deployment, the server to kill, and a check
		// that the failover is done (another server serves the lease table).
		start func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool)
	}{
		{name: "sentinel", ttl: 15 * time.Second, keepsSessions: true,
			start: func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool) {
				set := testenv.RedisSentinel(t, time.Second)
				old := set.Primary.Addr()
				return set, set.Primary, func() bool {
					addr, err := set.PrimaryAddr(t)
					return err == nil && addr != old
				}
			}},
		{name: "cluster", ttl: failoverTTL, start: func(t *testing.T) (testenv.RedisTarget, *testenv.RedisServer, func() bool) {
			set := testenv.RedisCluster(t, 3, 1, 2*time.Second)
			const tableKey = "poolgate:{cluster}:leaseepoch"
			victim := set.PrimaryOf(t, tableKey)
			return set, victim, func() bool { return set.PrimaryOf(t, tableKey) != victim }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, victim, failedOver := tt.start(t)
			s := startClusterOn(t, target, 3, func(int) []string { return []string{"POOLGATE_LEASE_TTL=" + tt.ttl.String()} })
			s.startNginx()
			s.waitSpread(60 * time.Second)

			l := s.startLoad(t, true)

			killedAt := time.Now()
			l.killed.Store(killedAt.UnixNano())
			victim.Kill()
			testenv.WaitFor(t, 60*time.Second, "another Redis server to take over", failedOver)
			failover := time.Since(killedAt)
			// Spread again, and stable: within the failover, one lease TTL
			// and a worker start (generous on a loaded machine).
			s.waitSpread(failover + tt.ttl + 30*time.Second)
			serving := time.Since(killedAt)
			recovered := s.waitRecovered(60 * time.Second)
			l.recovered.Store(recovered.UnixNano())
			time.Sleep(6 * time.Second) // conversations on the new primary
			l.end()

			t.Logf("%s: failover %s, all accounts spread and serving %s, stores recovered %s after the kill; %d failed requests; "+
				"follow-ups: %d reused, %d fell back; %d sent after the stores recovered (%d of conversations begun before the kill, "+
				"%d the first after a turn served during the failover), %d of them lost their session",
				tt.name, failover.Round(100*time.Millisecond), serving.Round(100*time.Millisecond),
				recovered.Sub(killedAt).Round(100*time.Millisecond), l.failed.Load(), l.fu.reused.Load(), l.fu.fellBack.Load(),
				l.fu.after.Load(), l.fu.straddle.Load(), l.fu.resumed.Load(), l.fu.afterLost.Load())
			l.check(t)
			if l.fu.reused.Load() == 0 {
				t.Errorf("no follow-up reused its session")
			}
			if tt.keepsSessions && (l.fu.resumed.Load() == 0 || l.fu.afterLost.Load() > 0) {
				t.Errorf("%d of %d follow-ups sent after the stores recovered (%d the first after a turn served during the failover) "+
					"started their session over; want some such first turns, and every follow-up continued",
					l.fu.afterLost.Load(), l.fu.after.Load(), l.fu.resumed.Load())
			}
			// Nine clients, each with at most one request in flight: a
			// failed request costs a client at least a second, so the window
			// bounds them.
			if limit := int32(9 * (serving / time.Second)); l.failed.Load() > limit {
				t.Errorf("%d failed requests, want at most %d (nine clients over %s)", l.failed.Load(), limit, serving.Round(time.Second))
			}
			s.checkUsage(l)
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

	l := s.startLoad(t, false)

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
