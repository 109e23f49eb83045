package bundle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
)

func storeSuite(t *testing.T, s Store) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.LoadBundle(ctx, "acct-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadBundle(missing) error = %v, want ErrNotFound", err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	v := func(token int64, at time.Duration) Version {
		return Version{Token: token, Created: t0.Add(at)}
	}
	give := []byte("sealed-a-1")
	if err := s.SaveBundle(ctx, "acct-a", give, v(1, 0)); err != nil {
		t.Fatalf("SaveBundle() = %v", err)
	}
	give[0] = 'X' // the store keeps its own copy
	if err := s.SaveBundle(ctx, "acct-b", []byte("sealed-b"), v(1, 0)); err != nil {
		t.Fatalf("SaveBundle(b) = %v", err)
	}
	if got, err := s.LoadBundle(ctx, "acct-a"); err != nil || string(got) != "sealed-a-1" {
		t.Errorf("LoadBundle(a) = %q, %v; want %q, nil", got, err, "sealed-a-1")
	}
	if err := s.SaveBundle(ctx, "acct-a", []byte("sealed-a-2"), v(1, time.Minute)); err != nil {
		t.Fatalf("SaveBundle(overwrite) = %v", err)
	}
	// A replica that lost the lease (lower token), or an older bundle, never
	// overwrites the newer one.
	for _, stale := range []Version{v(0, time.Hour), v(1, time.Second)} {
		if err := s.SaveBundle(ctx, "acct-a", []byte("stale"), stale); !errors.Is(err, ErrStale) {
			t.Errorf("SaveBundle(%+v) = %v, want ErrStale", stale, err)
		}
	}
	got, err := s.LoadBundle(ctx, "acct-a")
	if err != nil || string(got) != "sealed-a-2" {
		t.Errorf("LoadBundle(a) after overwrite = %q, %v; want %q, nil", got, err, "sealed-a-2")
	}
	got[0] = 'X' // callers may scribble on what they got
	if got, _ := s.LoadBundle(ctx, "acct-a"); string(got) != "sealed-a-2" {
		t.Errorf("LoadBundle(a) after the caller changed its copy = %q", got)
	}
	if got, err := s.LoadBundle(ctx, "acct-b"); err != nil || string(got) != "sealed-b" {
		t.Errorf("LoadBundle(b) = %q, %v; want %q, nil", got, err, "sealed-b")
	}
	// The next holder's token wins even with an older bundle.
	if err := s.SaveBundle(ctx, "acct-a", []byte("sealed-a-3"), v(2, -time.Hour)); err != nil {
		t.Errorf("SaveBundle(next token) = %v", err)
	}
	if got, _ := s.LoadBundle(ctx, "acct-a"); string(got) != "sealed-a-3" {
		t.Errorf("LoadBundle(a) after the next holder's save = %q", got)
	}
}

func TestMemoryStore(t *testing.T) { storeSuite(t, NewMemoryStore()) }

// redisConn connects to srv under a key prefix of its own, as the session
// store's connection the bundle store shares.
func redisConn(t *testing.T, srv testenv.RedisTarget, cfg redisconn.ConnConfig) *redisconn.Conn {
	t.Helper()
	cfg.Prefix = testenv.KeyPrefix(t)
	c := redisconn.NewConn(cfg, testenv.Dial(t, srv.Mode(), srv.URL()))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestRedisStore(t *testing.T) {
	srv := testenv.Redis(t)
	tier := redisConn(t, srv, redisconn.ConnConfig{})
	r := NewRedisStore(tier)
	storeSuite(t, r)

	// Stored in Redis without TTL, and visible to another replica.
	raw := srv.Client(t)
	ctx := context.Background()
	if ttl, err := raw.TTL(ctx, r.key("acct-a")).Result(); err != nil || ttl != -1 {
		t.Errorf("TTL(bundle) = %v, %v; want -1 (no expiry)", ttl, err)
	}
	other := NewRedisStore(tier)
	if got, err := other.LoadBundle(ctx, "acct-b"); err != nil || string(got) != "sealed-b" {
		t.Errorf("other replica LoadBundle(b) = %q, %v; want %q, nil", got, err, "sealed-b")
	}
	// A bundle removed from Redis is gone for the replica holding a mirror.
	if err := raw.Del(ctx, r.key("acct-b")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadBundle(ctx, "acct-b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadBundle(deleted in Redis) error = %v, want ErrNotFound", err)
	}
}

// A bundle and its version share a hash tag (one slot of a Redis Cluster),
// and the key the versions before the tags wrote is still read: data in a
// Redis that outlived an upgrade is not lost.
func TestRedisStoreKeys(t *testing.T) {
	client := redis.NewClient(&redis.Options{})
	r := NewRedisStore(redisconn.NewConn(redisconn.ConnConfig{Prefix: "p:"}, client))
	defer client.Close()
	tests := []struct {
		name string
		give string
		want string
	}{
		{name: "bundle", give: r.key("acct-1"), want: "p:{bundle:acct-1}"},
		{name: "version", give: r.versionKey("acct-1"), want: "p:{bundle:acct-1}:ver"},
		{name: "legacy", give: r.legacyKey("acct-1"), want: "p:bundle:acct-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give != tt.want {
				t.Errorf("key = %q, want %q", tt.give, tt.want)
			}
		})
	}
}

func TestRedisStoreReadsLegacyKey(t *testing.T) {
	srv := testenv.Redis(t)
	tier := redisConn(t, srv, redisconn.ConnConfig{})
	r := NewRedisStore(tier)
	ctx := context.Background()
	if err := srv.Client(t).Set(ctx, r.legacyKey("acct-old"), "sealed-old", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := r.LoadBundle(ctx, "acct-old"); err != nil || string(got) != "sealed-old" {
		t.Errorf("LoadBundle(legacy) = %q, %v; want %q, nil", got, err, "sealed-old")
	}
}

// The suite passes on a three-primary Redis Cluster.
func TestRedisStoreOnCluster(t *testing.T) {
	cl := testenv.RedisCluster(t, 3, 0, 5*time.Second)
	storeSuite(t, NewRedisStore(redisConn(t, cl, redisconn.ConnConfig{})))
}

func TestRedisStoreOutage(t *testing.T) {
	srv := testenv.Redis(t)
	var errs testenv.OpErrors
	tier := redisConn(t, srv, redisconn.ConnConfig{RetryInterval: 50 * time.Millisecond, OnError: errs.Add})
	r := NewRedisStore(tier)
	ctx := context.Background()
	if err := r.SaveBundle(ctx, "acct-up", []byte("saved while up"), Version{}); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	start := time.Now()
	if err := r.SaveBundle(ctx, "acct-down", []byte("saved while down"), Version{}); err != nil {
		t.Errorf("SaveBundle() while down = %v, want nil (local copy)", err)
	}
	if d := time.Since(start); d > 3*timeout {
		t.Errorf("SaveBundle() while down took %s, want about the %s deadline", d, timeout)
	}
	for _, acct := range []string{"acct-up", "acct-down"} {
		if _, err := r.LoadBundle(ctx, acct); err != nil {
			t.Errorf("LoadBundle(%s) while down = %v, want the local copy", acct, err)
		}
	}
	if errs.Get("save_bundle") != 1 || errs.Get("load_bundle") < 1 {
		t.Errorf("OnError calls: save_bundle %d, load_bundle %d; want 1 and >= 1", errs.Get("save_bundle"), errs.Get("load_bundle"))
	}
	srv.Thaw()
	time.Sleep(60 * time.Millisecond) // past the retry interval
	if err := tier.Ping(ctx); err != nil {
		t.Fatalf("Ping() after thaw = %v", err)
	}
	// The bundle saved while Redis was away reaches Redis on the next load.
	if got, err := r.LoadBundle(ctx, "acct-down"); err != nil || string(got) != "saved while down" {
		t.Errorf("LoadBundle(acct-down) after thaw = %q, %v", got, err)
	}
	if got, err := srv.Client(t).Get(ctx, r.key("acct-down")).Result(); err != nil || got != "saved while down" {
		t.Errorf("Redis copy of acct-down = %q, %v; want it pushed back", got, err)
	}
}

// A Redis that came back empty gets this replica's bundles back, and a
// bundle Redis still has is left as it is.
func TestRedisStoreRepublish(t *testing.T) {
	srv := testenv.Redis(t)
	tier := redisConn(t, srv, redisconn.ConnConfig{})
	r := NewRedisStore(tier)
	ctx := context.Background()
	for _, a := range []string{"acct-a", "acct-b"} {
		if err := r.SaveBundle(ctx, a, []byte("sealed-"+a), Version{Token: 1}); err != nil {
			t.Fatal(err)
		}
	}
	raw := srv.Client(t)
	if err := raw.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Set(ctx, r.key("acct-b"), "newer-b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Republish(ctx); err != nil || n != 1 {
		t.Fatalf("Republish() = %d, %v; want 1 put back", n, err)
	}
	other := NewRedisStore(tier) // another replica, with no copies of its own
	for acct, want := range map[string]string{"acct-a": "sealed-acct-a", "acct-b": "newer-b"} {
		if got, err := other.LoadBundle(ctx, acct); err != nil || string(got) != want {
			t.Errorf("LoadBundle(%s) after Republish = %q, %v; want %q", acct, got, err, want)
		}
	}
}
