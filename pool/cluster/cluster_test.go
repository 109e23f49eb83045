package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeCluster is an in-memory Store whose calls can be made to fail.
type fakeCluster struct {
	mu   sync.Mutex
	down bool
	// closedUntil admits no new owner before it, as Redis does for one TTL
	// after it starts empty.
	closedUntil time.Time
	leases      map[string]Lease
	tokens      map[string]int64
	replicas    map[string]Replica
}

var errDown = errors.New("store down")

func newFakeCluster() *fakeCluster {
	return &fakeCluster{leases: map[string]Lease{}, tokens: map[string]int64{}, replicas: map[string]Replica{}}
}

func (f *fakeCluster) setDown(v bool) { f.mu.Lock(); f.down = v; f.mu.Unlock() }

func (f *fakeCluster) live(a string) (Lease, bool) {
	l, ok := f.leases[a]
	return l, ok && time.Now().Before(l.Expires)
}

func (f *fakeCluster) AcquireLease(_ context.Context, a, holder string, ttl time.Duration) (Lease, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return Lease{}, false, errDown
	}
	if l, ok := f.live(a); ok && l.Holder != holder {
		return l, false, nil
	}
	if time.Now().Before(f.closedUntil) {
		return Lease{}, false, nil
	}
	f.tokens[a]++
	l := Lease{Account: a, Holder: holder, Token: f.tokens[a], Expires: time.Now().Add(ttl)}
	f.leases[a] = l
	return l, true, nil
}

func (f *fakeCluster) RenewLease(_ context.Context, a, holder string, token int64, ttl time.Duration) (Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return Lease{}, errDown
	}
	l, ok := f.live(a)
	if !ok || l.Holder != holder || l.Token != token {
		return Lease{}, ErrLeaseLost
	}
	l.Expires = time.Now().Add(ttl)
	f.leases[a] = l
	return l, nil
}

func (f *fakeCluster) ReleaseLease(_ context.Context, a, holder string, token int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errDown
	}
	if l, ok := f.leases[a]; ok && l.Holder == holder && l.Token == token {
		delete(f.leases, a)
	}
	return nil
}

func (f *fakeCluster) Leases(_ context.Context, accounts []string) ([]Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	out := make([]Lease, len(accounts))
	for i, a := range accounts {
		if l, ok := f.live(a); ok {
			out[i] = l
		}
	}
	return out, nil
}

func (f *fakeCluster) Heartbeat(_ context.Context, r Replica, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errDown
	}
	f.replicas[r.ID] = r
	return nil
}

func (f *fakeCluster) Replicas(context.Context) ([]Replica, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, errDown
	}
	var out []Replica
	for _, r := range f.replicas {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeCluster) LeaveCluster(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.replicas, id)
	return nil
}

var _ Store = (*fakeCluster)(nil)

func TestClusterFencesWhenTheStoreIsGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, sup := readyPool(t, "a", "b")
		store := newFakeCluster()
		c := New(Config{ID: "r1", LeaseTTL: 5 * time.Second}, sup, p, store, nil, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		time.Sleep(time.Second)
		if held := c.Status().Held; len(held) != 2 || !p.Serves("a") {
			t.Fatalf("held %v, want both accounts in use", held)
		}
		store.setDown(true)
		lastRenewal := time.Now()
		// The replica must stop trusting its leases before they can expire
		// in the store (5s after the last renewal).
		for p.Serves("a") || p.Serves("b") {
			time.Sleep(10 * time.Millisecond)
		}
		if d := time.Since(lastRenewal); d >= 5*time.Second {
			t.Errorf("still serving %s after the last renewal, want under the 5s TTL", d)
		}
		synctest.Wait()
		if held := c.Status().Held; len(held) != 0 {
			t.Errorf("still holds %v without the store", held)
		}
		cancel()
		<-done
	})
}

func TestClusterHandsAnAccountToALateReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, sup := readyPool(t, "a", "b")
		store := newFakeCluster()
		c := New(Config{ID: "r1", LeaseTTL: 5 * time.Second, DrainTimeout: time.Second}, sup, p, store, nil, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		time.Sleep(time.Second)
		if len(c.Status().Held) != 2 {
			t.Fatal("did not take both free accounts")
		}
		// A second replica joins, holding nothing: r1 is above the floor (1).
		_ = store.Heartbeat(ctx, Replica{ID: "r2", URL: "http://r2"}, time.Hour)
		time.Sleep(5 * time.Second)
		if held := c.Status().Held; len(held) != 1 {
			t.Fatalf("held %v after r2 joined, want one account handed over", held)
		}
		free, _ := store.Leases(ctx, []string{"a", "b"})
		if free[0].Holder != "" && free[1].Holder != "" {
			t.Errorf("no lease released: %+v", free)
		}
		cancel()
		<-done
	})
}
