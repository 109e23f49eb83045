package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/route"
)

// store is every method the callers' interfaces pick from; both
// implementations must satisfy it and pass storeSuite.
type store interface {
	TakeAffinity(ctx context.Context, key route.AffinityKey) (route.Affinity, error)
	PutAffinity(ctx context.Context, key route.AffinityKey, a route.Affinity) error
	FlushAffinity(ctx context.Context, owner string) (int, error)
	SaveResponse(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep ...string) error
	LoadResponse(ctx context.Context, id string) ([]byte, error)
	DeleteResponse(ctx context.Context, id string) error
	Ping(ctx context.Context) error
	Healthy() bool
	Close() error
}

var (
	_ store = (*Memory)(nil)
	_ store = (*Redis)(nil)
)

// newStoreFunc builds a fresh, empty store for one test with the given
// memory settings (OnEvict included).
type newStoreFunc func(t *testing.T, cfg MemoryConfig) store

// evictLog collects OnEvict calls.
type evictLog struct {
	mu  sync.Mutex
	got []route.Affinity
}

func (l *evictLog) add(a route.Affinity) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, a)
}

func (l *evictLog) list() []route.Affinity {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func aff(n int) route.Affinity {
	return route.Affinity{Instance: fmt.Sprintf("inst-%d", n), SessionID: fmt.Sprintf("sess-%d", n), Model: "m"}
}

// storeSuite is the behaviour both stores share.
func storeSuite(t *testing.T, newStore newStoreFunc) {
	ctx := context.Background()

	t.Run("TakeAfterPut", func(t *testing.T) {
		s := newStore(t, MemoryConfig{})
		mustPut(t, s, "o:1", aff(1))
		got, err := s.TakeAffinity(ctx, "o:1")
		if err != nil || got != aff(1) {
			t.Fatalf("TakeAffinity() = %v, %v; want %v, nil", got, err, aff(1))
		}
		if _, err := s.TakeAffinity(ctx, "o:1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second TakeAffinity() error = %v, want ErrNotFound", err)
		}
	})

	t.Run("TakeMissing", func(t *testing.T) {
		s := newStore(t, MemoryConfig{})
		if _, err := s.TakeAffinity(ctx, "o:none"); !errors.Is(err, ErrNotFound) {
			t.Errorf("TakeAffinity() error = %v, want ErrNotFound", err)
		}
	})

	t.Run("OverwriteReportsAbandoned", func(t *testing.T) {
		var ev evictLog
		s := newStore(t, MemoryConfig{OnEvict: ev.add})
		mustPut(t, s, "o:1", aff(1))
		mustPut(t, s, "o:1", aff(1)) // same value: nothing abandoned
		mustPut(t, s, "o:1", aff(2))
		got, err := s.TakeAffinity(ctx, "o:1")
		if err != nil || got != aff(2) {
			t.Fatalf("TakeAffinity() = %v, %v; want %v, nil", got, err, aff(2))
		}
		if got, want := ev.list(), []route.Affinity{aff(1)}; !slices.Equal(got, want) {
			t.Errorf("evicted %v, want %v", got, want)
		}
	})

	t.Run("ConcurrentTakeHasOneWinner", func(t *testing.T) {
		s := newStore(t, MemoryConfig{})
		mustPut(t, s, "o:race", aff(1))
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for range 16 {
			wg.Go(func() {
				if _, err := s.TakeAffinity(ctx, "o:race"); err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Errorf("%d concurrent takes succeeded, want 1", wins)
		}
	})

	t.Run("Flush", func(t *testing.T) { flushSuite(t, newStore) })
	t.Run("Responses", func(t *testing.T) { responseSuite(t, newStore) })

	t.Run("Health", func(t *testing.T) {
		s := newStore(t, MemoryConfig{})
		if err := s.Ping(ctx); err != nil {
			t.Errorf("Ping() = %v, want nil", err)
		}
		if !s.Healthy() {
			t.Errorf("Healthy() = false, want true")
		}
	})
}

func flushSuite(t *testing.T, newStore newStoreFunc) {
	ctx := context.Background()
	keys := []route.AffinityKey{"aa:1", "aa:2", "aab:1", "bb:1"}
	tests := []struct {
		name      string
		give      string
		want      int
		wantStays []route.AffinityKey
	}{
		{name: "owner", give: "aa", want: 2, wantStays: []route.AffinityKey{"aab:1", "bb:1"}},
		{name: "other owner", give: "bb", want: 1, wantStays: []route.AffinityKey{"aa:1", "aa:2", "aab:1"}},
		{name: "unknown owner", give: "zz", want: 0, wantStays: keys},
		{name: "all", give: "", want: 4, wantStays: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev evictLog
			s := newStore(t, MemoryConfig{OnEvict: ev.add})
			for i, k := range keys {
				mustPut(t, s, k, aff(i))
			}
			got, err := s.FlushAffinity(ctx, tt.give)
			if err != nil || got != tt.want {
				t.Fatalf("FlushAffinity(%q) = %d, %v; want %d, nil", tt.give, got, err, tt.want)
			}
			if n := len(ev.list()); n != tt.want {
				t.Errorf("reported %d evictions, want %d", n, tt.want)
			}
			var stays []route.AffinityKey
			for _, k := range keys {
				if _, err := s.TakeAffinity(ctx, k); err == nil {
					stays = append(stays, k)
				}
			}
			if !slices.Equal(stays, tt.wantStays) {
				t.Errorf("left %v, want %v", stays, tt.wantStays)
			}
		})
	}
}

func responseSuite(t *testing.T, newStore newStoreFunc) {
	ctx := context.Background()
	s := newStore(t, MemoryConfig{})
	if _, err := s.LoadResponse(ctx, "resp_missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadResponse(missing) error = %v, want ErrNotFound", err)
	}
	if err := s.DeleteResponse(ctx, "resp_missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteResponse(missing) error = %v, want ErrNotFound", err)
	}
	give := []byte(`{"id":"resp_1"}`)
	if err := s.SaveResponse(ctx, "", "resp_1", give, 0); err != nil {
		t.Fatalf("SaveResponse() = %v", err)
	}
	give[0] = 'X' // the store must have kept its own copy
	got, err := s.LoadResponse(ctx, "resp_1")
	if err != nil || string(got) != `{"id":"resp_1"}` {
		t.Fatalf("LoadResponse() = %q, %v; want %q, nil", got, err, `{"id":"resp_1"}`)
	}
	if err := s.SaveResponse(ctx, "", "resp_1", []byte("v2"), time.Hour); err != nil {
		t.Fatalf("SaveResponse(overwrite) = %v", err)
	}
	if got, err := s.LoadResponse(ctx, "resp_1"); err != nil || string(got) != "v2" {
		t.Errorf("LoadResponse() after overwrite = %q, %v; want %q, nil", got, err, "v2")
	}
	if err := s.DeleteResponse(ctx, "resp_1"); err != nil {
		t.Fatalf("DeleteResponse() = %v", err)
	}
	if _, err := s.LoadResponse(ctx, "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LoadResponse() after delete error = %v, want ErrNotFound", err)
	}
	if err := s.DeleteResponse(ctx, "resp_1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second DeleteResponse() error = %v, want ErrNotFound", err)
	}
}

func mustPut(t *testing.T, s store, key route.AffinityKey, a route.Affinity) {
	t.Helper()
	if err := s.PutAffinity(context.Background(), key, a); err != nil {
		t.Fatalf("PutAffinity(%q) = %v", key, err)
	}
}

func TestMemoryStore(t *testing.T) {
	storeSuite(t, func(t *testing.T, cfg MemoryConfig) store { return NewMemory(cfg) })
}
