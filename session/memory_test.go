package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/route"
)

func TestMemoryAffinityExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev evictLog
		m := NewMemory(MemoryConfig{AffinityTTL: time.Minute, OnEvict: ev.add})
		ctx := context.Background()
		mustPut(t, m, "own:1", aff(1))
		mustPut(t, m, "own:2", aff(2))
		time.Sleep(59 * time.Second)
		if got, err := m.TakeAffinity(ctx, "own:1"); err != nil || got != aff(1) {
			t.Errorf("TakeAffinity() before the TTL = %v, %v; want %v, nil", got, err, aff(1))
		}
		time.Sleep(time.Second)
		if _, err := m.TakeAffinity(ctx, "own:2"); !errors.Is(err, ErrNotFound) {
			t.Errorf("TakeAffinity() at the TTL error = %v, want ErrNotFound", err)
		}
		if got, want := ev.list(), []route.Affinity{aff(2)}; !slices.Equal(got, want) {
			t.Errorf("evicted %v, want %v", got, want)
		}
	})
}

func TestMemoryPutRefreshesTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := NewMemory(MemoryConfig{AffinityTTL: time.Minute})
		mustPut(t, m, "own:1", aff(1))
		time.Sleep(50 * time.Second)
		mustPut(t, m, "own:1", aff(1))
		time.Sleep(50 * time.Second)
		if got, err := m.TakeAffinity(context.Background(), "own:1"); err != nil || got != aff(1) {
			t.Errorf("TakeAffinity() = %v, %v; want %v, nil", got, err, aff(1))
		}
	})
}

func TestMemoryRunSweeps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev evictLog
		m := NewMemory(MemoryConfig{AffinityTTL: time.Minute, ResponseTTL: time.Hour, SweepInterval: time.Minute, OnEvict: ev.add})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { m.Run(ctx) })
		mustPut(t, m, "own:1", aff(1))
		if err := m.SaveResponse(ctx, "", "resp_1", []byte("x"), 0); err != nil {
			t.Fatalf("SaveResponse() = %v", err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got, want := ev.list(), []route.Affinity{aff(1)}; !slices.Equal(got, want) {
			t.Errorf("evicted %v after the TTL, want %v", got, want)
		}
		if a, r := m.lens(); a != 0 || r != 1 {
			t.Errorf("holds %d entries and %d responses after 2m, want 0 and 1", a, r)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if a, r := m.lens(); a != 0 || r != 0 {
			t.Errorf("holds %d entries and %d responses after 1h, want 0 and 0", a, r)
		}
		cancel()
		wg.Wait()
	})
}

func TestMemoryResponseTTL(t *testing.T) {
	tests := []struct {
		name     string
		give     time.Duration // SaveResponse ttl
		wantLive time.Duration
	}{
		{name: "default", give: 0, wantLive: 24 * time.Hour},
		{name: "explicit", give: time.Hour, wantLive: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := NewMemory(MemoryConfig{})
				ctx := context.Background()
				if err := m.SaveResponse(ctx, "", "resp_1", []byte("x"), tt.give); err != nil {
					t.Fatalf("SaveResponse() = %v", err)
				}
				time.Sleep(tt.wantLive - time.Second)
				if _, err := m.LoadResponse(ctx, "resp_1"); err != nil {
					t.Errorf("LoadResponse() a second before expiry = %v, want nil", err)
				}
				time.Sleep(time.Second)
				if _, err := m.LoadResponse(ctx, "resp_1"); !errors.Is(err, ErrNotFound) {
					t.Errorf("LoadResponse() at expiry error = %v, want ErrNotFound", err)
				}
			})
		})
	}
}

func TestMemoryAffinityLRU(t *testing.T) {
	tests := []struct {
		name        string
		give        []string // keys put in order
		wantEvicted []route.Affinity
	}{
		{name: "under cap", give: []string{"o:1", "o:2"}, wantEvicted: nil},
		{name: "oldest goes", give: []string{"o:1", "o:2", "o:3"}, wantEvicted: []route.Affinity{aff(1)}},
		{name: "put refreshes", give: []string{"o:1", "o:2", "o:1", "o:3"}, wantEvicted: []route.Affinity{aff(2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev evictLog
			m := NewMemory(MemoryConfig{MaxAffinity: 2, OnEvict: ev.add})
			for _, k := range tt.give {
				var n int
				_, _ = fmt.Sscanf(k, "o:%d", &n)
				mustPut(t, m, route.AffinityKey(k), aff(n))
			}
			if got := ev.list(); !slices.Equal(got, tt.wantEvicted) {
				t.Errorf("evicted %v, want %v", got, tt.wantEvicted)
			}
		})
	}
}

func TestMemoryResponseCaps(t *testing.T) {
	tests := []struct {
		name     string
		give     []int // sizes saved as resp_0, resp_1, ...
		wantKept []string
	}{
		{name: "under caps", give: []int{4, 4}, wantKept: []string{"resp_0", "resp_1"}},
		{name: "byte cap", give: []int{6, 6}, wantKept: []string{"resp_1"}},
		{name: "count cap", give: []int{1, 1, 1, 1}, wantKept: []string{"resp_1", "resp_2", "resp_3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewMemory(MemoryConfig{MaxResponses: 3, MaxResponseBytes: 10})
			ctx := context.Background()
			var ids []string
			for i, size := range tt.give {
				ids = append(ids, fmt.Sprintf("resp_%d", i))
				if err := m.SaveResponse(ctx, "", ids[i], make([]byte, size), 0); err != nil {
					t.Fatalf("SaveResponse(%d bytes) = %v", size, err)
				}
			}
			var kept []string
			for _, id := range ids {
				if _, err := m.LoadResponse(ctx, id); err == nil {
					kept = append(kept, id)
				}
			}
			if !slices.Equal(kept, tt.wantKept) {
				t.Errorf("kept %v, want %v", kept, tt.wantKept)
			}
		})
	}
}

func TestMemoryResponseTooLarge(t *testing.T) {
	m := NewMemory(MemoryConfig{MaxResponseBytes: 10})
	err := m.SaveResponse(context.Background(), "", "resp_big", make([]byte, 11), 0)
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("SaveResponse(11 bytes) error = %v, want ErrTooLarge", err)
	}
}

func BenchmarkMemoryPutTake(b *testing.B) {
	m := NewMemory(MemoryConfig{})
	ctx := context.Background()
	keys := make([]route.AffinityKey, 1024)
	for i := range keys {
		keys[i] = route.AffinityKey(fmt.Sprintf("%016x:%032x", i, i))
	}
	a := aff(1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%len(keys)]
		_ = m.PutAffinity(ctx, k, a)
		_, _ = m.TakeAffinity(ctx, k)
		i++
	}
}

func BenchmarkMemoryPutTakeParallel(b *testing.B) {
	m := NewMemory(MemoryConfig{})
	ctx := context.Background()
	a := aff(1)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		k := route.AffinityKey(fmt.Sprintf("%p:conv", pb))
		for pb.Next() {
			_ = m.PutAffinity(ctx, k, a)
			_, _ = m.TakeAffinity(ctx, k)
		}
	})
}

func BenchmarkMemoryPutFull(b *testing.B) {
	m := NewMemory(MemoryConfig{MaxAffinity: 1000})
	ctx := context.Background()
	keys := make([]route.AffinityKey, 4096)
	for i := range keys {
		keys[i] = route.AffinityKey(fmt.Sprintf("o:%d", i))
	}
	a := aff(1)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		_ = m.PutAffinity(ctx, keys[i%len(keys)], a) // evicts once full
		i++
	}
}

// lens returns the number of affinity entries and response objects held.
func (m *Memory) lens() (affinity, responses int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.aff.len(), m.resp.len()
}
