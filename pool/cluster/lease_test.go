package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/testenv"
)

// openStore opens a lease store on srv under a prefix of its own (so tests
// can share one server), connected as the daemon connects.
func openStore(t *testing.T, srv testenv.RedisTarget, cfg RedisConfig) *RedisStore {
	t.Helper()
	cfg.Prefix = testenv.KeyPrefix(t)
	return NewRedisStore(cfg, testenv.Dial(t, srv.Mode(), srv.URL()))
}

// openLeaseRedis opens a store on srv whose lease quarantine is already over,
// as in a cluster that has been up for a while, and a raw client beside it.
func openLeaseRedis(t *testing.T, srv testenv.RedisTarget, cfg RedisConfig) (*RedisStore, redis.UniversalClient) {
	t.Helper()
	r := openStore(t, srv, cfg)
	raw := srv.Universal(t)
	endQuarantine(t, r, raw)
	return r, raw
}

// endQuarantine moves the end of the lease quarantine into the past.
func endQuarantine(t *testing.T, r *RedisStore, raw redis.UniversalClient) {
	t.Helper()
	if err := raw.Set(context.Background(), r.leaseEpochKey(), "0", 0).Err(); err != nil {
		t.Fatalf("end quarantine: %v", err)
	}
}

// loseData deletes every key of r's prefix, like a Redis that restarted
// empty.
func loseData(t *testing.T, r *RedisStore, raw redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	del := func(ctx context.Context, c *redis.Client) error {
		keys, err := c.Keys(ctx, r.cfg.Prefix+"*").Result()
		for _, k := range keys {
			if err == nil {
				err = c.Del(ctx, k).Err()
			}
		}
		return err
	}
	var err error
	switch c := raw.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, del)
	case *redis.Client:
		err = del(ctx, c)
	}
	if err != nil {
		t.Fatalf("lose data: %v", err)
	}
}

// leaseResult is what a lease step observed, in comparable form.
type leaseResult struct {
	Holder string
	Token  int64
	OK     bool
	Err    error
}

func (g leaseResult) matches(w leaseResult) bool {
	return g.Holder == w.Holder && g.Token == w.Token && g.OK == w.OK && errors.Is(g.Err, w.Err)
}

type leaseStep struct {
	name string
	give func(t *testing.T) leaseResult
	want leaseResult
}

// runLeaseSteps runs steps in order; each builds on the state the earlier
// ones left.
func runLeaseSteps(t *testing.T, tests []leaseStep) {
	t.Helper()
	for _, tt := range tests {
		got := tt.give(t)
		if !got.matches(tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// leaseOps builds lease steps against one store and one account.
type leaseOps struct {
	r       *RedisStore
	raw     redis.UniversalClient
	account string
	ttl     time.Duration
}

func (o leaseOps) acquire(holder string) func(*testing.T) leaseResult {
	return func(*testing.T) leaseResult {
		l, ok, err := o.r.AcquireLease(context.Background(), o.account, holder, o.ttl)
		return leaseResult{Holder: l.Holder, Token: l.Token, OK: ok, Err: err}
	}
}

func (o leaseOps) renew(holder string, token int64) func(*testing.T) leaseResult {
	return func(*testing.T) leaseResult {
		l, err := o.r.RenewLease(context.Background(), o.account, holder, token, o.ttl)
		return leaseResult{Holder: l.Holder, Token: l.Token, OK: err == nil, Err: err}
	}
}

func (o leaseOps) release(holder string, token int64) func(*testing.T) leaseResult {
	return func(*testing.T) leaseResult {
		err := o.r.ReleaseLease(context.Background(), o.account, holder, token)
		return leaseResult{OK: err == nil, Err: err}
	}
}

// expire removes the lease key as its PX expiry would, leaving the token
// counter alone.
func (o leaseOps) expire() func(*testing.T) leaseResult {
	return func(t *testing.T) leaseResult {
		err := o.raw.Del(context.Background(), o.r.leaseKey(o.account)).Err()
		return leaseResult{OK: err == nil, Err: err}
	}
}

func TestLeaseLifecycle(t *testing.T) { leaseLifecycle(t, testenv.Redis(t)) }

func leaseLifecycle(t *testing.T, srv testenv.RedisTarget) {
	r, raw := openLeaseRedis(t, srv, RedisConfig{})
	o := leaseOps{r: r, raw: raw, account: "acct-1", ttl: 10 * time.Second}
	runLeaseSteps(t, []leaseStep{
		{name: "acquire free", give: o.acquire("a"), want: leaseResult{Holder: "a", Token: 1, OK: true}},
		{name: "acquire held by another", give: o.acquire("b"), want: leaseResult{Holder: "a", Token: 1}},
		{name: "acquire by the holder renews", give: o.acquire("a"), want: leaseResult{Holder: "a", Token: 1, OK: true}},
		{name: "renew by the holder", give: o.renew("a", 1), want: leaseResult{Holder: "a", Token: 1, OK: true}},
		{name: "renew by another", give: o.renew("b", 1), want: leaseResult{Err: ErrLeaseLost}},
		{name: "renew with an old token", give: o.renew("a", 0), want: leaseResult{Err: ErrLeaseLost}},
		{name: "release by another does nothing", give: o.release("b", 1), want: leaseResult{OK: true}},
		{name: "still held after a foreign release", give: o.acquire("b"), want: leaseResult{Holder: "a", Token: 1}},
		{name: "release", give: o.release("a", 1), want: leaseResult{OK: true}},
		{name: "release is idempotent", give: o.release("a", 1), want: leaseResult{OK: true}},
		{name: "renew after release", give: o.renew("a", 1), want: leaseResult{Err: ErrLeaseLost}},
		{name: "re-acquire by another", give: o.acquire("b"), want: leaseResult{Holder: "b", Token: 2, OK: true}},
		{name: "b's lease expires", give: o.expire(), want: leaseResult{OK: true}},
		{name: "takeover after expiry", give: o.acquire("c"), want: leaseResult{Holder: "c", Token: 3, OK: true}},
		{name: "old holder's renew fails", give: o.renew("b", 2), want: leaseResult{Err: ErrLeaseLost}},
		{name: "old holder's release does nothing", give: o.release("b", 2), want: leaseResult{OK: true}},
		{name: "c's lease expires", give: o.expire(), want: leaseResult{OK: true}},
		{name: "tokens rise after the key vanished", give: o.acquire("a"), want: leaseResult{Holder: "a", Token: 4, OK: true}},
		{name: "the first holder's old token stays dead", give: o.renew("a", 1), want: leaseResult{Err: ErrLeaseLost}},
	})
}

// TestLeaseQuarantine covers a Redis that lost its data while replicas held
// leases: no new owner until the holders could have re-established theirs.
func TestLeaseQuarantine(t *testing.T) { leaseQuarantine(t, testenv.Redis(t)) }

func leaseQuarantine(t *testing.T, srv testenv.RedisTarget) {
	r := openStore(t, srv, RedisConfig{})
	raw := srv.Universal(t)
	o := leaseOps{r: r, raw: raw, account: "acct-1", ttl: 10 * time.Second}
	runLeaseSteps(t, []leaseStep{
		{name: "first start is quarantined", give: o.acquire("a"), want: leaseResult{}},
		{name: "quarantine over", give: leaseDo(func() { endQuarantine(t, r, raw) }), want: leaseResult{OK: true}},
		{name: "acquire", give: o.acquire("a"), want: leaseResult{Holder: "a", Token: 1, OK: true}},
		{name: "release", give: o.release("a", 1), want: leaseResult{OK: true}},
		{name: "acquire again", give: o.acquire("a"), want: leaseResult{Holder: "a", Token: 2, OK: true}},
		{name: "redis loses its data", give: leaseDo(func() { loseData(t, r, raw) }), want: leaseResult{OK: true}},
		{name: "new owner refused", give: o.acquire("b"), want: leaseResult{}},
		{name: "holder re-establishes", give: o.renew("a", 2), want: leaseResult{Holder: "a", Token: 2, OK: true}},
		{name: "others see the holder", give: o.acquire("b"), want: leaseResult{Holder: "a", Token: 2}},
		{name: "stale token refused", give: o.renew("c", 1), want: leaseResult{Err: ErrLeaseLost}},
		{name: "holder releases", give: o.release("a", 2), want: leaseResult{OK: true}},
		{name: "stale token cannot re-establish", give: o.renew("c", 1), want: leaseResult{Err: ErrLeaseLost}},
		{name: "still quarantined", give: o.acquire("b"), want: leaseResult{}},
		{name: "quarantine over again", give: leaseDo(func() { endQuarantine(t, r, raw) }), want: leaseResult{OK: true}},
		{name: "tokens did not go back", give: o.acquire("b"), want: leaseResult{Holder: "b", Token: 3, OK: true}},
		{name: "no re-establishing after the quarantine", give: o.renew("a", 2), want: leaseResult{Err: ErrLeaseLost}},
	})
}

// leaseDo turns a setup action into a step.
func leaseDo(f func()) func(*testing.T) leaseResult {
	return func(*testing.T) leaseResult {
		f()
		return leaseResult{OK: true}
	}
}

func TestLeaseQuarantineLength(t *testing.T) {
	srv := testenv.Redis(t)
	r := openStore(t, srv, RedisConfig{})
	const ttl = 5 * time.Second
	before := time.Now()
	l, ok, err := r.AcquireLease(context.Background(), "acct-1", "a", ttl)
	if err != nil || ok || l.Holder != "" {
		t.Fatalf("AcquireLease() on a fresh Redis = %+v, %v, %v; want an empty lease, false, nil", l, ok, err)
	}
	if l.Expires.Before(before.Add(ttl-time.Second)) || l.Expires.After(time.Now().Add(ttl)) {
		t.Errorf("quarantine ends in %v, want about %v", time.Until(l.Expires), ttl)
	}
}

func TestLeaseExpiry(t *testing.T) {
	srv := testenv.Redis(t)
	r, raw := openLeaseRedis(t, srv, RedisConfig{})
	ctx := context.Background()
	const ttl = 200 * time.Millisecond

	before := time.Now()
	l, ok, err := r.AcquireLease(ctx, "acct-1", "a", ttl)
	after := time.Now()
	if err != nil || !ok {
		t.Fatalf("AcquireLease() = %+v, %v, %v; want ok", l, ok, err)
	}
	// The holder's deadline is conservative: counted from before the call.
	if l.Expires.Before(before.Add(ttl)) || l.Expires.After(after.Add(ttl)) {
		t.Errorf("Expires = call start %+v, want within [%v, %v]", l.Expires.Sub(before), ttl, after.Add(ttl).Sub(before))
	}
	// Redis enforces the expiry itself.
	if pttl := raw.PTTL(ctx, r.leaseKey("acct-1")).Val(); pttl <= 0 || pttl > ttl {
		t.Errorf("PTTL after acquire = %v, want in (0, %v]", pttl, ttl)
	}
	if err := raw.PExpire(ctx, r.leaseKey("acct-1"), 20*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.RenewLease(ctx, "acct-1", "a", l.Token, 10*time.Second); err != nil {
		t.Fatalf("RenewLease() = %v", err)
	}
	if pttl := raw.PTTL(ctx, r.leaseKey("acct-1")).Val(); pttl <= 5*time.Second {
		t.Errorf("PTTL after renew = %v, want about 10s", pttl)
	}
	// Another replica learns when the lease can be free at the latest.
	other, ok, err := r.AcquireLease(ctx, "acct-1", "b", ttl)
	if err != nil || ok || other.Holder != "a" {
		t.Fatalf("AcquireLease(b) = %+v, %v, %v; want a's lease, false", other, ok, err)
	}
	if d := time.Until(other.Expires); d < 9*time.Second || d > 10*time.Second {
		t.Errorf("other's view of Expires is in %v, want about 10s", d)
	}
	// The token counter never expires.
	if pttl := raw.PTTL(ctx, r.leaseTokenKey("acct-1")).Val(); pttl != -1 {
		t.Errorf("token counter PTTL = %v, want none (-1)", pttl)
	}
}

func TestLeaseConcurrentAcquire(t *testing.T) { leaseConcurrentAcquire(t, testenv.Redis(t)) }

func leaseConcurrentAcquire(t *testing.T, srv testenv.RedisTarget) {
	r, _ := openLeaseRedis(t, srv, RedisConfig{})
	const holders = 10
	for round := range 20 {
		account := fmt.Sprintf("acct-%d", round)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
			seen    = map[Lease]int{}
		)
		start := make(chan struct{})
		for i := range holders {
			holder := fmt.Sprintf("h%d", i)
			wg.Go(func() {
				<-start
				l, ok, err := r.AcquireLease(context.Background(), account, holder, 10*time.Second)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("AcquireLease(%s) = %v", holder, err)
					return
				}
				if ok {
					winners = append(winners, holder)
				}
				seen[Lease{Holder: l.Holder, Token: l.Token}]++
			})
		}
		close(start)
		wg.Wait()
		if len(winners) != 1 || len(seen) != 1 {
			t.Fatalf("%s: winners %v, leases seen %v; want one winner that everyone sees", account, winners, seen)
		}
		if want := (Lease{Holder: winners[0], Token: 1}); seen[want] != holders {
			t.Errorf("%s: leases seen %v, want %d x %+v", account, seen, holders, want)
		}
	}
}

// countingHook counts commands sent, pipelines counted once.
type countingHook struct {
	mu sync.Mutex
	n  int
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.mu.Lock()
		h.n++
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (h *countingHook) take() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n
	h.n = 0
	return n
}

func TestLeasesOneRoundTrip(t *testing.T) {
	srv := testenv.Redis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	var hook countingHook
	client.AddHook(&hook)
	t.Cleanup(func() { _ = client.Close() })
	r := NewRedisStore(RedisConfig{Prefix: "t:leases:"}, client)
	raw := srv.Client(t)
	endQuarantine(t, r, raw)
	ctx := context.Background()

	accounts := []string{"acct-1", "acct-2", "acct-3", "acct-4"}
	for _, give := range []struct{ account, holder string }{{"acct-1", "a"}, {"acct-3", "b"}} {
		if _, ok, err := r.AcquireLease(ctx, give.account, give.holder, 10*time.Second); err != nil || !ok {
			t.Fatalf("AcquireLease(%s, %s) = %v, %v", give.account, give.holder, ok, err)
		}
	}
	if _, err := r.Leases(ctx, accounts); err != nil { // loads the script
		t.Fatalf("Leases() = %v", err)
	}
	hook.take()
	got, err := r.Leases(ctx, accounts)
	if err != nil {
		t.Fatalf("Leases() = %v", err)
	}
	if n := hook.take(); n != 1 {
		t.Errorf("Leases() sent %d commands, want 1", n)
	}
	want := []Lease{{Account: "acct-1", Holder: "a", Token: 1}, {}, {Account: "acct-3", Holder: "b", Token: 1}, {}}
	if len(got) != len(want) {
		t.Fatalf("Leases() = %+v, want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		g.Expires = time.Time{}
		if g != want[i] {
			t.Errorf("Leases()[%d] = %+v, want %+v", i, g, want[i])
		}
		if live := !got[i].Expires.IsZero(); live != (want[i].Holder != "") {
			t.Errorf("Leases()[%d].Expires = %v, want set only for held leases", i, got[i].Expires)
		}
	}
}

// TestLeaseCallsFailWithoutRedis checks that a replica cut off from Redis
// learns it at once, within the lease timeout, and never believes a call
// succeeded.
func TestLeaseCallsFailWithoutRedis(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name string
		give func(t *testing.T) (srv *testenv.RedisServer, cut func())
	}{
		{name: "killed redis-server", give: func(t *testing.T) (*testenv.RedisServer, func()) {
			srv := testenv.Redis(t)
			return srv, srv.Kill
		}},
		{name: "frozen redis-server", give: func(t *testing.T) (*testenv.RedisServer, func()) {
			srv := testenv.Redis(t)
			t.Cleanup(srv.Thaw)
			return srv, srv.Freeze
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, cut := tt.give(t)
			r, _ := openLeaseRedis(t, srv, RedisConfig{Timeout: timeout})
			ctx := context.Background()
			held, ok, err := r.AcquireLease(ctx, "acct-1", "a", 10*time.Second)
			if err != nil || !ok {
				t.Fatalf("AcquireLease() before the outage = %v, %v", ok, err)
			}
			cut()
			for _, c := range cutOffCalls(r, held) {
				start := time.Now()
				err := c.give(ctx)
				d := time.Since(start)
				if err == nil || errors.Is(err, ErrLeaseLost) || d > timeout+200*time.Millisecond {
					t.Errorf("%s = %v after %v; want a Redis error within %v", c.name, err, d, timeout)
				}
			}
		})
	}
}

// cutOffCalls lists every lease and registry call, each reporting an error
// for anything but a real success.
func cutOffCalls(r *RedisStore, held Lease) []struct {
	name string
	give func(context.Context) error
} {
	return []struct {
		name string
		give func(context.Context) error
	}{
		{name: "AcquireLease(new)", give: func(ctx context.Context) error {
			return okErr(r.AcquireLease(ctx, "acct-2", "a", 10*time.Second))
		}},
		{name: "AcquireLease(held)", give: func(ctx context.Context) error {
			return okErr(r.AcquireLease(ctx, "acct-1", "a", 10*time.Second))
		}},
		{name: "RenewLease", give: func(ctx context.Context) error {
			_, err := r.RenewLease(ctx, "acct-1", "a", held.Token, 10*time.Second)
			return err
		}},
		{name: "ReleaseLease", give: func(ctx context.Context) error { return r.ReleaseLease(ctx, "acct-1", "a", held.Token) }},
		{name: "Leases", give: func(ctx context.Context) error {
			_, err := r.Leases(ctx, []string{"acct-1"})
			return err
		}},
		{name: "Heartbeat", give: func(ctx context.Context) error {
			return r.Heartbeat(ctx, Replica{ID: "r1"}, 10*time.Second)
		}},
		{name: "Replicas", give: func(ctx context.Context) error {
			_, err := r.Replicas(ctx)
			return err
		}},
		{name: "LeaveCluster", give: func(ctx context.Context) error { return r.LeaveCluster(ctx, "r1") }},
	}
}

// okErr folds AcquireLease's result into one error: nil only for a lease
// really taken.
func okErr(_ Lease, ok bool, err error) error {
	if err == nil && !ok {
		return errors.New("not acquired")
	}
	return err
}

func TestLeaseArgs(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	r := NewRedisStore(RedisConfig{}, client)
	tests := []struct {
		name            string
		account, holder string
		ttl             time.Duration
		want            string
	}{
		{name: "empty account", holder: "a", ttl: time.Second, want: "empty account"},
		{name: "empty holder", account: "x", ttl: time.Second, want: "empty holder"},
		{name: "zero ttl", account: "x", holder: "a", want: "under 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := r.AcquireLease(context.Background(), tt.account, tt.holder, tt.ttl)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("AcquireLease() = %v, want an error containing %q", err, tt.want)
			}
			_, err = r.RenewLease(context.Background(), tt.account, tt.holder, 1, tt.ttl)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("RenewLease() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestLeaseKeys(t *testing.T) {
	client := redis.NewClient(&redis.Options{})
	defer client.Close()
	r := NewRedisStore(RedisConfig{Prefix: "p:"}, client)
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "lease", give: r.leaseKey("acct-1"), want: "p:{cluster}:lease:acct-1"},
		{name: "lease token", give: r.leaseTokenKey("acct-1"), want: "p:{cluster}:leasetok:acct-1"},
		{name: "lease epoch", give: r.leaseEpochKey(), want: "p:{cluster}:leaseepoch"},
		{name: "replica", give: r.replicaKey("r1"), want: "p:{cluster}:replica:r1"},
		{name: "replica index", give: r.replicaIndexKey(), want: "p:{cluster}:replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give != tt.want {
				t.Errorf("key = %q, want %q", tt.give, tt.want)
			}
		})
	}
}

// A Redis filled to maxmemory (noeviction) by other data refuses writes; the
// leases and heartbeats of the replicas still go through, or every replica
// would fence its accounts at once.
func TestLeasesSurviveAFullRedis(t *testing.T) {
	srv := testenv.Redis(t)
	r, raw := openLeaseRedis(t, srv, RedisConfig{})
	ctx := context.Background()
	l, ok, err := r.AcquireLease(ctx, "acct-1", "r1", 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	tok := l.Token
	if err := raw.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	used, _ := raw.Info(ctx, "memory").Result()
	if err := raw.ConfigSet(ctx, "maxmemory", fmt.Sprint(usedMemory(t, used)+2<<20)).Err(); err != nil {
		t.Fatal(err)
	}
	filler := strings.Repeat("x", 64<<10)
	full := false
	for i := 0; i < 1000 && !full; i++ {
		err := raw.Set(ctx, fmt.Sprintf("filler:%d", i), filler, 0).Err()
		full = err != nil && strings.Contains(err.Error(), "OOM")
	}
	if !full {
		t.Fatal("Redis never reported OOM")
	}
	if _, err := r.RenewLease(ctx, "acct-1", "r1", tok, 10*time.Second); err != nil {
		t.Errorf("RenewLease in a full Redis: %v", err)
	}
	if _, ok, err := r.AcquireLease(ctx, "acct-2", "r1", 10*time.Second); err != nil || !ok {
		t.Errorf("AcquireLease in a full Redis: %v, %v", ok, err)
	}
	if err := r.Heartbeat(ctx, Replica{ID: "r1"}, 10*time.Second); err != nil {
		t.Errorf("Heartbeat in a full Redis: %v", err)
	}
	if err := r.ReleaseLease(ctx, "acct-1", "r1", tok); err != nil {
		t.Errorf("ReleaseLease in a full Redis: %v", err)
	}
}

// usedMemory reads used_memory from INFO memory.
func usedMemory(t *testing.T, info string) int64 {
	t.Helper()
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no used_memory in INFO")
	return 0
}
