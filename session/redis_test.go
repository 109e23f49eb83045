package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
)

// openTestRedis opens a store on srv under a prefix of its own, so tests can
// share one server.
func openTestRedis(t *testing.T, srv testenv.RedisTarget, cfg RedisConfig) *Redis {
	t.Helper()
	cfg.Prefix = testenv.KeyPrefix(t)
	return NewRedis(cfg, testenv.Dial(t, srv.Mode(), srv.URL()))
}

func TestRedisStore(t *testing.T) {
	srv := testenv.Redis(t)
	storeSuite(t, func(t *testing.T, cfg MemoryConfig) store {
		return openTestRedis(t, srv, RedisConfig{Memory: cfg})
	})
}

// Every suite of the store passes on a three-primary Redis Cluster: each
// script's keys share a slot, and reads and deletes of several responses
// cross slots without MGET or multi-key DEL.
func TestRedisStoreOnCluster(t *testing.T) {
	cl := testenv.RedisCluster(t, 3, 0, 5*time.Second)
	storeSuite(t, func(t *testing.T, cfg MemoryConfig) store {
		return openTestRedis(t, cl, RedisConfig{Memory: cfg})
	})
	t.Run("Quota", func(t *testing.T) { quotaSuite(t, cl) })
	t.Run("Chain", func(t *testing.T) { chainSuite(t, cl) })
	t.Run("Expiry", func(t *testing.T) { expirySuite(t, cl) })
}

func TestRedisKeys(t *testing.T) {
	r := NewRedis(RedisConfig{Prefix: "p:"}, redis.NewClient(&redis.Options{}))
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "affinity", give: r.entryKey("own:conv"), want: "p:{aff:1}:own:conv"},
		{name: "affinity index", give: r.affinityIndexKey(15), want: "p:{aff:15}:idx"},
		{name: "response", give: r.responseKey("resp_1"), want: "p:resp:resp_1"},
		{name: "owner index", give: r.responseIndexKey("k1"), want: "p:{respq:k1}:idx"},
		{name: "owner sizes", give: r.responseSizesKey("k1"), want: "p:{respq:k1}:sz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give != tt.want {
				t.Errorf("key = %q, want %q", tt.give, tt.want)
			}
		})
	}
}

// The affinity value's JSON is what Redis holds across upgrades: entries
// written by an older version must still decode, and new ones must look
// the same.
func TestAffinityEncoding(t *testing.T) {
	tests := []struct {
		name string
		give route.Affinity
		want string
	}{
		{name: "with model", give: route.Affinity{Instance: "acct-1", SessionID: "s-9", Model: "qwen"},
			want: `{"i":"acct-1","s":"s-9","m":"qwen"}`},
		{name: "without model", give: route.Affinity{Instance: "acct-1", SessionID: "s-9"},
			want: `{"i":"acct-1","s":"s-9"}`},
		{name: "stamped", give: route.Affinity{Instance: "acct-1", SessionID: "s-9", At: 1795000000123},
			want: `{"i":"acct-1","s":"s-9","t":1795000000123}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := encodeAffinity(tt.give); got != tt.want {
				t.Errorf("encodeAffinity() = %s, want %s", got, tt.want)
			}
			got, err := decodeAffinity(tt.want)
			if err != nil || got != tt.give {
				t.Errorf("decodeAffinity(%s) = %+v, %v; want %+v", tt.want, got, err, tt.give)
			}
		})
	}
}

func TestRedisOutageDegradesAndRecovers(t *testing.T) {
	srv := testenv.Redis(t)
	var logs testenv.Buffer
	var errs testenv.OpErrors
	r := openTestRedis(t, srv, RedisConfig{
		RetryInterval: 50 * time.Millisecond,
		OnError:       errs.Add,
		Logger:        slog.New(slog.NewTextHandler(&logs, nil)),
	})
	ctx := context.Background()
	raw := srv.Client(t)

	// Take the previous turn's entry, put the next one: the router's loop.
	for i := range 300 {
		if i == 100 {
			srv.Kill()
		}
		turnStart := time.Now()
		key := route.AffinityKey(fmt.Sprintf("own:%d", i))
		if err := r.PutAffinity(ctx, key, aff(i)); err != nil {
			t.Fatalf("turn %d: PutAffinity() = %v", i, err)
		}
		got, err := r.TakeAffinity(ctx, key)
		if err != nil || got != aff(i) {
			t.Fatalf("turn %d: TakeAffinity() = %v, %v; want %v, nil", i, got, err, aff(i))
		}
		if err := r.SaveResponse(ctx, "", string(key), []byte("body"), 0); err != nil {
			t.Fatalf("turn %d: SaveResponse() = %v", i, err)
		}
		if _, err := r.LoadResponse(ctx, string(key)); err != nil {
			t.Fatalf("turn %d: LoadResponse() = %v", i, err)
		}
		// A dead server refuses at once; no turn may wait out a deadline.
		if d := time.Since(turnStart); d > 200*time.Millisecond {
			t.Errorf("turn %d took %v, want under 200ms", i, d)
		}
		time.Sleep(time.Millisecond) // let the outage span several retry intervals
	}
	if n := countIn(&logs, "level=WARN"); n != 1 {
		t.Errorf("logged %d warnings, want 1:\n%s", n, logs.String())
	}
	if errs.Get("take_affinity") == 0 || errs.Get("put_affinity") == 0 || errs.Get("load_response") == 0 {
		t.Errorf("OnError counts = %v, want every op counted", errs.String())
	}
	if r.Healthy() {
		t.Errorf("Healthy() = true during the outage, want false")
	}

	srv.Restart()
	start := time.Now()
	for i := 0; ; i++ {
		key := route.AffinityKey(fmt.Sprintf("own:after:%d", i))
		if err := r.PutAffinity(ctx, key, aff(i)); err != nil {
			t.Fatalf("PutAffinity() after restart = %v", err)
		}
		if raw.Exists(ctx, r.entryKey(string(key))).Val() == 1 {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("puts still not reaching Redis %v after the restart", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("recovered %v after the restart", time.Since(start))
	if !r.Healthy() {
		t.Errorf("Healthy() = false after recovery, want true")
	}
	if n := countIn(&logs, "recovered"); n != 1 {
		t.Errorf("logged %d recoveries, want 1:\n%s", n, logs.String())
	}
}

func TestRedisRunRecoversWithoutTraffic(t *testing.T) {
	srv := testenv.Redis(t)
	r := openTestRedis(t, srv, RedisConfig{RetryInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	defer wg.Wait()
	defer cancel()

	srv.Kill()
	if err := r.Ping(ctx); err == nil {
		t.Fatalf("Ping() with Redis killed = nil, want an error")
	}
	srv.Restart()
	testenv.WaitFor(t, 5*time.Second, "Healthy() after the restart", r.Healthy)
}

func TestRedisHungCallsReturnInTime(t *testing.T) {
	frozen := testenv.Redis(t)
	tests := []struct {
		name string
		give func(t *testing.T) string // hangs a server, returns its URL
	}{
		{name: "frozen redis-server", give: func(t *testing.T) string {
			frozen.Freeze()
			t.Cleanup(frozen.Thaw)
			return frozen.URL()
		}},
		{name: "listener that never answers", give: silentListener},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRedis(RedisConfig{RetryInterval: time.Minute}, testenv.Dial(t, "single", tt.give(t)))
			ctx := context.Background()
			calls := []struct {
				name  string
				give  func() error
				limit time.Duration
			}{
				// The first call waits out its deadline; the rest skip Redis.
				{name: "put", give: func() error { return r.PutAffinity(ctx, "own:1", aff(1)) }, limit: 450 * time.Millisecond},
				{name: "take", give: func() error { _, err := r.TakeAffinity(ctx, "own:1"); return err }, limit: 20 * time.Millisecond},
				{name: "save", give: func() error { return r.SaveResponse(ctx, "", "r", []byte("x"), 0) }, limit: 20 * time.Millisecond},
				{name: "load", give: func() error { _, err := r.LoadResponse(ctx, "r"); return err }, limit: 20 * time.Millisecond},
			}
			for _, c := range calls {
				start := time.Now()
				err := c.give()
				if d := time.Since(start); err != nil || d > c.limit {
					t.Errorf("%s = %v after %v; want nil within %v", c.name, err, d, c.limit)
				}
			}
			if r.Healthy() {
				t.Errorf("Healthy() = true, want false")
			}
		})
	}
}

// silentListener accepts connections and never answers; it returns its URL.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "redis://" + l.Addr().String()
}

func TestRedisExpiryReported(t *testing.T) { expirySuite(t, testenv.Redis(t)) }

func expirySuite(t *testing.T, srv testenv.RedisTarget) {
	var ev evictLog
	r := openTestRedis(t, srv, RedisConfig{Memory: MemoryConfig{AffinityTTL: 100 * time.Millisecond, OnEvict: ev.add}})
	ctx := context.Background()
	mustPut(t, r, "own:taken", aff(1))
	mustPut(t, r, "own:swept", aff(2))
	time.Sleep(150 * time.Millisecond)

	if _, err := r.TakeAffinity(ctx, "own:taken"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TakeAffinity(expired) error = %v, want ErrNotFound", err)
	}
	r.sweepRemote(ctx)
	r.sweepRemote(ctx) // a second sweep finds nothing more
	got := ev.list()
	if len(got) != 2 || got[0] != aff(1) || got[1] != aff(2) {
		t.Errorf("evicted %v, want [%v %v]", got, aff(1), aff(2))
	}
	raw := srv.Universal(t)
	for sh := range affinityShards {
		if n := raw.ZCard(ctx, r.affinityIndexKey(sh)).Val(); n != 0 {
			t.Errorf("index shard %d holds %d members after the sweep, want 0", sh, n)
		}
	}
}

func TestRedisLocalOnlyEntries(t *testing.T) {
	srv := testenv.Redis(t)
	var ev evictLog
	var errs testenv.OpErrors
	r := openTestRedis(t, srv, RedisConfig{
		RetryInterval: time.Hour, // stay down once down
		OnError:       errs.Add,
		Memory:        MemoryConfig{MaxAffinity: 2, OnEvict: ev.add},
	})
	ctx := context.Background()
	mustPut(t, r, "own:mirrored", aff(0)) // in Redis and mirrored locally
	srv.Freeze()
	for i := 1; i <= 3; i++ { // the local cap evicts own:mirrored (silently) and own:1
		mustPut(t, r, route.AffinityKey(fmt.Sprintf("own:%d", i)), aff(i))
	}
	if got := ev.list(); len(got) != 1 || got[0] != aff(1) {
		t.Errorf("evicted %v, want [%v]", got, aff(1))
	}
	if err := r.SaveResponse(ctx, "", "resp_down", []byte("x"), 0); err != nil {
		t.Errorf("SaveResponse() while down = %v", err)
	}
	if got, err := r.LoadResponse(ctx, "resp_down"); err != nil || string(got) != "x" {
		t.Errorf("LoadResponse() while down = %q, %v; want %q, nil", got, err, "x")
	}
	if err := r.DeleteResponse(ctx, "resp_down"); err != nil {
		t.Errorf("DeleteResponse() while down = %v", err)
	}
	if n, err := r.FlushAffinity(ctx, "own"); err != nil || n != 2 {
		t.Errorf("FlushAffinity() while down = %d, %v; want 2 (own:2, own:3), nil", n, err)
	}
	mustPut(t, r, "bob:1", aff(4))
	for _, op := range []string{"save_response", "delete_response", "flush_affinity"} {
		if n := errs.Get(op); n != 1 {
			t.Errorf("OnError(%s) called %d times, want 1", op, n)
		}
	}
	srv.Thaw()
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("Ping() after thaw = %v", err)
	}
	// An entry put while Redis was down is still found after it is back.
	if got, err := r.TakeAffinity(ctx, "bob:1"); err != nil || got != aff(4) {
		t.Errorf("TakeAffinity(local-only) = %v, %v; want %v, nil", got, err, aff(4))
	}
}

func TestRedisReplaysLocalTakes(t *testing.T) {
	srv := testenv.Redis(t)
	r := openTestRedis(t, srv, RedisConfig{RetryInterval: time.Hour})
	ctx := context.Background()
	mustPut(t, r, "own:1", aff(1))
	srv.Freeze()
	if got, err := r.TakeAffinity(ctx, "own:1"); err != nil || got != aff(1) {
		t.Fatalf("TakeAffinity() while frozen = %v, %v; want %v, nil", got, err, aff(1))
	}
	srv.Thaw()
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("Ping() after thaw = %v", err)
	}
	r.replay(ctx)
	// The Redis copy must not hand the same upstream session out again.
	if _, err := r.TakeAffinity(ctx, "own:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TakeAffinity() after replay error = %v, want ErrNotFound", err)
	}
}

func TestRedisOnErrorSkipsCallerCancel(t *testing.T) {
	srv := testenv.Redis(t)
	var calls atomic.Int32
	r := openTestRedis(t, srv, RedisConfig{OnError: func(string, error) { calls.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.TakeAffinity(ctx, "own:1"); !errors.Is(err, context.Canceled) {
		t.Errorf("TakeAffinity(cancelled) error = %v, want context.Canceled", err)
	}
	if n := calls.Load(); n != 0 || !r.Healthy() {
		t.Errorf("OnError called %d times, Healthy() = %v; want 0, true", n, r.Healthy())
	}
}

func countIn(b *testenv.Buffer, s string) int { return strings.Count(b.String(), s) }
