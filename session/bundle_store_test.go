package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/testenv"
)

// bundleStore is what the bundle service needs of both stores.
type bundleStore interface {
	SaveBundle(ctx context.Context, account string, sealed []byte, v BundleVersion) error
	LoadBundle(ctx context.Context, account string) ([]byte, error)
}

var (
	_ bundleStore = (*Memory)(nil)
	_ bundleStore = (*Redis)(nil)
)

func bundleStoreSuite(t *testing.T, s bundleStore) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.LoadBundle(ctx, "acct-a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadBundle(missing) error = %v, want ErrNotFound", err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	v := func(token int64, at time.Duration) BundleVersion {
		return BundleVersion{Token: token, Created: t0.Add(at)}
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
	for _, stale := range []BundleVersion{v(0, time.Hour), v(1, time.Second)} {
		if err := s.SaveBundle(ctx, "acct-a", []byte("stale"), stale); !errors.Is(err, ErrStaleBundle) {
			t.Errorf("SaveBundle(%+v) = %v, want ErrStaleBundle", stale, err)
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

func TestMemoryBundles(t *testing.T) {
	bundleStoreSuite(t, NewMemory(MemoryConfig{}))
}

func TestRedisBundles(t *testing.T) {
	srv := testenv.Redis(t)
	r := openTestRedis(t, srv, RedisConfig{})
	bundleStoreSuite(t, r)

	// Stored in Redis without TTL, and visible to another replica.
	raw := rawClient(t, srv)
	ctx := context.Background()
	if ttl, err := raw.TTL(ctx, r.bundleKey("acct-a")).Result(); err != nil || ttl != -1 {
		t.Errorf("TTL(bundle) = %v, %v; want -1 (no expiry)", ttl, err)
	}
	other := NewRedis(r.cfg, redis.NewClient(&redis.Options{Addr: srv.Addr()}))
	t.Cleanup(func() { _ = other.Close() })
	if got, err := other.LoadBundle(ctx, "acct-b"); err != nil || string(got) != "sealed-b" {
		t.Errorf("other replica LoadBundle(b) = %q, %v; want %q, nil", got, err, "sealed-b")
	}
	// A bundle removed from Redis is gone for the replica holding a mirror.
	if err := raw.Del(ctx, r.bundleKey("acct-b")).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadBundle(ctx, "acct-b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadBundle(deleted in Redis) error = %v, want ErrNotFound", err)
	}
}

func TestRedisBundleKey(t *testing.T) {
	r := NewRedis(RedisConfig{Prefix: "p:"}, redis.NewClient(&redis.Options{}))
	if got, want := r.bundleKey("acct-1"), "p:bundle:acct-1"; got != want {
		t.Errorf("bundleKey() = %q, want %q", got, want)
	}
}

func TestRedisBundleOutage(t *testing.T) {
	srv := testenv.Redis(t)
	var errs errorCounter
	r := openTestRedis(t, srv, RedisConfig{RetryInterval: 50 * time.Millisecond, OnError: errs.add})
	ctx := context.Background()
	if err := r.SaveBundle(ctx, "acct-up", []byte("saved while up"), BundleVersion{}); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	start := time.Now()
	if err := r.SaveBundle(ctx, "acct-down", []byte("saved while down"), BundleVersion{}); err != nil {
		t.Errorf("SaveBundle() while down = %v, want nil (local copy)", err)
	}
	if d := time.Since(start); d > 3*bundleTimeout {
		t.Errorf("SaveBundle() while down took %s, want about the %s deadline", d, bundleTimeout)
	}
	for _, acct := range []string{"acct-up", "acct-down"} {
		if _, err := r.LoadBundle(ctx, acct); err != nil {
			t.Errorf("LoadBundle(%s) while down = %v, want the local copy", acct, err)
		}
	}
	if errs.get("save_bundle") != 1 || errs.get("load_bundle") < 1 {
		t.Errorf("OnError calls = %s, want save_bundle 1 and load_bundle >= 1", errs.String())
	}
	srv.Thaw()
	time.Sleep(60 * time.Millisecond) // past the retry interval
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("Ping() after thaw = %v", err)
	}
	// The bundle saved while Redis was away reaches Redis on the next load.
	if got, err := r.LoadBundle(ctx, "acct-down"); err != nil || string(got) != "saved while down" {
		t.Errorf("LoadBundle(acct-down) after thaw = %q, %v", got, err)
	}
	if got, err := rawClient(t, srv).Get(ctx, r.bundleKey("acct-down")).Result(); err != nil || got != "saved while down" {
		t.Errorf("Redis copy of acct-down = %q, %v; want it pushed back", got, err)
	}
}
