package session

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
)

// stamped is aff(n) written at Unix ms at.
func stamped(n int, at int64) route.Affinity {
	a := aff(n)
	a.At = at
	return a
}

// heldLog records OnHeld calls.
type heldLog struct {
	mu sync.Mutex
	ns []int
}

func (h *heldLog) add(n int) { h.mu.Lock(); h.ns = append(h.ns, n); h.mu.Unlock() }

func (h *heldLog) last() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ns) == 0 {
		return -1
	}
	return h.ns[len(h.ns)-1]
}

// Affinity put on one replica while Redis was away is written back once
// it answers, so another replica finds the conversation; where another
// replica wrote a newer entry meanwhile, that one stays, and the session
// each write-back abandons (ours, or the older one replaced) is reported.
func TestRedisWritesBackAffinityPutWhileAway(t *testing.T) {
	srv := testenv.Redis(t)
	var ev evictLog
	var held heldLog
	a := openTestRedis(t, srv, RedisConfig{RetryInterval: time.Hour, OnHeld: held.add,
		Memory: MemoryConfig{OnEvict: ev.add}})
	b := openTestRedis(t, srv, RedisConfig{})
	ctx := context.Background()
	mustPut(t, b, "own:older", stamped(1, 50)) // replaced by a's newer entry

	srv.Freeze()
	for _, p := range []struct {
		key route.AffinityKey
		a   route.Affinity
	}{{"own:alone", stamped(2, 100)}, {"own:older", stamped(3, 100)}, {"own:newer", stamped(4, 100)}} {
		mustPut(t, a, p.key, p.a) // Redis does not answer: local only
	}
	if got := held.last(); got != 3 {
		t.Errorf("OnHeld last told %d, want 3 entries held", got)
	}
	srv.Thaw()
	mustPut(t, b, "own:newer", stamped(5, 200)) // b served the conversation later

	if err := a.Ping(ctx); err != nil {
		t.Fatalf("Ping() after the thaw = %v", err)
	}
	a.catchUp(ctx)
	if got := held.last(); got != 0 {
		t.Errorf("OnHeld last told %d after the write-back, want 0", got)
	}
	for key, want := range map[route.AffinityKey]route.Affinity{"own:alone": stamped(2, 100), "own:older": stamped(3, 100),
		"own:newer": stamped(5, 200)} {
		if got, err := b.TakeAffinity(ctx, key); err != nil || got != want {
			t.Errorf("another replica's TakeAffinity(%s) = %+v, %v; want %+v", key, got, err, want)
		}
	}
	// Written back, an entry is Redis's alone: a's local copy is gone.
	if _, err := a.TakeAffinity(ctx, "own:alone"); !errors.Is(err, ErrNotFound) {
		t.Errorf("TakeAffinity(own:alone) on a after b took it = %v, want ErrNotFound", err)
	}
	got := ev.list()
	slices.SortFunc(got, func(x, y route.Affinity) int { return int(x.At - y.At) })
	if want := []route.Affinity{stamped(1, 50), stamped(4, 100)}; !slices.Equal(got, want) {
		t.Errorf("evicted %+v, want %+v (the one replaced, and ours where a newer one stays)", got, want)
	}
}

// A write-back that Redis does not take leaves the entry where it was: in
// the local tier, still served there, and queued for the next try.
func TestRedisWriteBackKeepsWhatFails(t *testing.T) {
	srv := testenv.Redis(t)
	var held heldLog
	a := openTestRedis(t, srv, RedisConfig{RetryInterval: time.Hour, ResponseTimeout: 200 * time.Millisecond,
		OnHeld: held.add})
	b := openTestRedis(t, srv, RedisConfig{})
	ctx := context.Background()
	srv.Freeze()
	mustPut(t, a, "own:1", stamped(1, 100))
	a.conn.Succeeded() // as if a call got through just before Redis hung again
	a.catchUp(ctx)
	if got := held.last(); got != 1 {
		t.Errorf("OnHeld last told %d after the failed write-back, want 1", got)
	}
	if got, err := a.TakeAffinity(ctx, "own:1"); err != nil || got != stamped(1, 100) {
		t.Errorf("TakeAffinity() while Redis is away = %+v, %v; want the entry", got, err)
	}
	mustPut(t, a, "own:1", stamped(1, 100))
	srv.Thaw()
	if err := a.Ping(ctx); err != nil {
		t.Fatalf("Ping() after the thaw = %v", err)
	}
	a.catchUp(ctx)
	if got, err := b.TakeAffinity(ctx, "own:1"); err != nil || got != stamped(1, 100) {
		t.Errorf("another replica's TakeAffinity() after the second try = %+v, %v; want the entry", got, err)
	}
}
