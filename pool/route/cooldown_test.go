package route

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/pool/worker"
)

// A cooldown ends once its time is up and the worker passed a health check
// after that: the pool asks for the check when the time is up, and takes
// the worker's report of it.
func TestCooldownEndsAfterAHealthCheck(t *testing.T) {
	tests := []struct {
		name string
		// downFor is how long after the cooldown's end the worker fails its
		// health checks.
		downFor time.Duration
		// back is when, after the cooldown's end, the instance is back in
		// rotation at the latest.
		back time.Duration
	}{
		{"healthy: back at the end", 0, 100 * time.Millisecond},
		{"unhealthy at the end: back after a check passes", 3 * time.Second, 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := supervisortest.New()
				var down atomic.Bool
				f.Health = func(ctx context.Context, _ string) (worker.AuthState, error) {
					if down.Load() {
						return worker.AuthState{}, errors.New("no answer")
					}
					return worker.AuthState{LoggedIn: true}, nil
				}
				p, _ := startFake(t, Config{}, f, supervisortest.Configs(t, false, "a"), nil)
				waitReady(t, p, "a")
				p.mu.Lock()
				m := p.byName["a"]
				p.mu.Unlock()
				if d := p.coolDown(m, 2*time.Second); d != 2*time.Second {
					t.Fatalf("cooldown of %v, want the retry-after 2s", d)
				}
				time.Sleep(1900 * time.Millisecond)
				if p.Serves("a") || p.Snapshot().Instances[0].CooldownUntil == nil {
					t.Fatal("a is back in rotation before its cooldown's end")
				}
				down.Store(tt.downFor > 0)
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if tt.downFor > 0 {
					time.Sleep(tt.downFor / 2)
					if p.Serves("a") || p.Snapshot().Instances[0].CooldownUntil == nil {
						t.Fatal("a is back in rotation while it fails its health checks")
					}
					time.Sleep(tt.downFor / 2)
					down.Store(false)
				}
				deadline := time.Now().Add(tt.back)
				for !p.Serves("a") && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
				if !p.Serves("a") || p.Snapshot().Instances[0].CooldownUntil != nil {
					t.Errorf("a is not back in rotation %v after its cooldown's end and a passed check", tt.back)
				}
			})
		})
	}
}

// Clearing a cooldown puts the instance back at once and starts the backoff
// over; an unknown name is an error.
func TestClearCooldown(t *testing.T) {
	p, _, _ := testPool(t, Config{}, "a")
	p.mu.Lock()
	m := p.byName["a"]
	p.mu.Unlock()
	p.coolDown(m, 0)
	if d := p.coolDown(m, 0); d != 10*time.Second {
		t.Errorf("second guessed cooldown %v, want 10s (doubled)", d)
	}
	if had, err := p.ClearCooldown("a"); !had || err != nil || !p.Serves("a") {
		t.Errorf("ClearCooldown: had %v, err %v, serves %v; want a cooldown cleared", had, err, p.Serves("a"))
	}
	if d := p.coolDown(m, 0); d != 5*time.Second {
		t.Errorf("guessed cooldown after a clear %v, want 5s (backoff over)", d)
	}
	if had, err := p.ClearCooldown("zz"); had || err == nil {
		t.Errorf("ClearCooldown of an unknown instance: %v, %v; want an error", had, err)
	}
}
