package route

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

func TestPickLeastInFlight(t *testing.T) {
	wcs := supervisortest.Configs(t, false, "a", "b", "c")
	wcs[0].MaxInFlight = 2
	p, _ := startFake(t, Config{}, supervisortest.New(), wcs, nil)
	waitReady(t, p, "a", "b", "c")
	s1, err := p.acquire(context.Background(), preference{})
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := p.acquire(context.Background(), preference{})
	s3, _ := p.acquire(context.Background(), preference{})
	got := map[string]bool{s1.Instance(): true, s2.Instance(): true, s3.Instance(): true}
	if len(got) != 3 {
		t.Errorf("three turns on %v, want one on each instance", got)
	}
}

func TestPickPreferAndHint(t *testing.T) {
	tests := []struct {
		name string
		give preference
		want string
	}{
		{"prefer", preference{Prefer: "b"}, "b"},
		{"prefer unknown falls back", preference{Prefer: "zz", Exclude: []string{"a", "c"}}, "b"},
		{"exclude", preference{Exclude: []string{"a", "b"}}, "c"},
		{"every one excluded: tried again", preference{Exclude: []string{"a", "b", "c"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _, _ := testPool(t, Config{}, "a", "b", "c")
			s, err := p.acquire(context.Background(), tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && s.Instance() != tt.want {
				t.Errorf("picked %s, want %s", s.Instance(), tt.want)
			}
		})
	}
}

func TestHintIsStable(t *testing.T) {
	p, _, _ := testPool(t, Config{}, "a", "b", "c", "d")
	first := ""
	for range 5 {
		s, err := p.acquire(context.Background(), preference{Hint: textHint("user-42")})
		if err != nil {
			t.Fatal(err)
		}
		if first == "" {
			first = s.Instance()
		}
		if s.Instance() != first {
			t.Fatalf("hint picked %s, then %s", first, s.Instance())
		}
		s.release()
	}
}

func TestQueueWaitsForRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, _ := testPool(t, Config{QueueTimeout: time.Minute}, "a")
		s1, _ := p.acquire(context.Background(), preference{})
		go func() {
			time.Sleep(3 * time.Second)
			s1.release()
		}()
		start := time.Now()
		s2, err := p.acquire(context.Background(), preference{})
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 3*time.Second {
			t.Errorf("waited %s, want 3s (until the release)", waited)
		}
		s2.release()
	})
}

func TestBusyPreferredWaitsThenFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, _ := testPool(t, Config{AffinityWait: 2 * time.Second}, "a", "b")
		held, _ := p.acquire(context.Background(), preference{Prefer: "a"})
		start := time.Now()
		s, err := p.acquire(context.Background(), preference{Prefer: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Instance() != "b" || time.Since(start) < 2*time.Second {
			t.Errorf("got %s after %s, want b after the 2s affinity wait", s.Instance(), time.Since(start))
		}
		held.release()
	})
}

func TestOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, _ := testPool(t, Config{MaxQueue: 1, QueueTimeout: 5 * time.Second}, "a")
		held, _ := p.acquire(context.Background(), preference{})
		queued := make(chan error, 1)
		go func() {
			_, err := p.acquire(context.Background(), preference{})
			queued <- err
		}()
		synctest.Wait()
		_, err := p.acquire(context.Background(), preference{})
		var oe *chat.OverloadedError
		if !errors.As(err, &oe) || oe.RetryAfter < time.Second {
			t.Fatalf("queue full: got %v, want OverloadedError with RetryAfter >= 1s", err)
		}
		err = <-queued
		if !errors.As(err, &oe) {
			t.Fatalf("queue timeout: got %v, want OverloadedError", err)
		}
		held.release()
	})
}

// A pool with nothing ready gives up after NoInstanceWait with
// ErrNoInstance; when every account needs a login (and none runs) the error
// says so too, so the caller is told why.
func TestNoInstance(t *testing.T) {
	tests := []struct {
		name       string
		loggedOut  []string
		failing    []string
		wantLogins bool
	}{
		{"workers that cannot start", nil, []string{"a", "b"}, false},
		{"every account logged out", []string{"a", "b"}, nil, true},
		{"one logged out, one that cannot start", []string{"a"}, []string{"b"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := supervisortest.New(tt.loggedOut...)
				for _, n := range tt.failing {
					f.FailLaunches(n, true) // the worker can't start: backoff, again and again
				}
				p, _ := startFake(t, Config{NoInstanceWait: 3 * time.Second}, f, supervisortest.Configs(t, false, "a", "b"), nil)
				start := time.Now()
				_, err := p.acquire(context.Background(), preference{})
				if !errors.Is(err, chat.ErrNoInstance) || errors.Is(err, chat.ErrNotLoggedIn) != tt.wantLogins {
					t.Fatalf("got %v, want ErrNoInstance, and ErrNotLoggedIn %v", err, tt.wantLogins)
				}
				if d := time.Since(start); d < 3*time.Second || d > 4*time.Second {
					t.Errorf("gave up after %s, want about 3s", d)
				}
			})
		})
	}
}

func TestCooldownSkipsInstance(t *testing.T) {
	p, _, _ := testPool(t, Config{}, "a", "b")
	p.coolDown(p.byName["a"], time.Minute)
	for range 3 {
		s, err := p.acquire(context.Background(), preference{Prefer: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Instance() != "b" {
			t.Fatalf("picked %s while a cools down", s.Instance())
		}
		s.release()
	}
	if snap := p.Snapshot(); snap.Instances[0].CooldownUntil == nil {
		t.Error("snapshot does not show the cooldown")
	}
}

func TestFenceTakesInstanceOutOfRotation(t *testing.T) {
	p, _, _ := testPool(t, Config{}, "a", "b")
	p.Fence("a", time.Now().Add(-time.Millisecond))
	for range 3 {
		s, err := p.acquire(context.Background(), preference{Prefer: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if s.Instance() != "a" {
			s.release()
			continue
		}
		t.Fatal("picked a fenced instance")
	}
	p.Fence("a", time.Time{})
	s, err := p.acquire(context.Background(), preference{Prefer: "a"})
	if err != nil || s.Instance() != "a" {
		t.Fatalf("unfenced instance not picked: %v", err)
	}
}

// TestHintsSpread: hints rank the instances each their own way, so new
// conversations spread over the pool.
func TestHintsSpread(t *testing.T) {
	nodes := []string{"acct-1", "acct-2", "acct-3", "acct-4"}
	got := map[string]int{}
	for i := range 4000 {
		hint, best, pick := textHint("s:", strconv.Itoa(i)), uint64(0), ""
		for _, n := range nodes {
			if s := rendezvous(hint, n); pick == "" || s > best {
				best, pick = s, n
			}
		}
		got[pick]++
	}
	for _, n := range nodes {
		if got[n] < 800 || got[n] > 1200 {
			t.Errorf("spread %v: %s got %d of 4000 hints, want about 1000", got, n, got[n])
		}
	}
}
