package login

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/browsertest"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// TestBackoffAndCooloff: attempts are spaced by the doubling backoff; after
// giving up, Ensure waits out the cool-off, then starts again. Each attempt
// is counted in the metrics.
func TestBackoffAndCooloff(t *testing.T) {
	bin := browsertest.Chromium(t)
	synctest.Test(t, func(t *testing.T) {
		m := metrics.New(prometheus.NewRegistry())
		r, err := NewRunner(Config{Chromium: bin, Backoff: 5 * time.Second, Cooloff: time.Minute, Metrics: m},
			slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		var (
			mu    sync.Mutex
			calls []time.Duration
		)
		begin := time.Now()
		tg := supervisor.LoginTarget{
			Instance: "acct-1",
			Account:  worker.Account{Username: "user", Password: "pass-word"},
			LoginURL: func(context.Context) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				calls = append(calls, time.Since(begin))
				return "", errors.New("worker busy")
			},
			Confirm: func(context.Context) (bool, error) { return false, nil },
		}
		r.Ensure(tg)
		time.Sleep(time.Minute - time.Second)
		synctest.Wait()
		mu.Lock()
		got := calls
		mu.Unlock()
		want := []time.Duration{0, 5 * time.Second, 15 * time.Second}
		if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Errorf("got attempts at %v, want %v", got, want)
		}
		var pb dto.Metric
		if err := m.LoginAttempts.WithLabelValues("failure").Write(&pb); err != nil || pb.GetCounter().GetValue() != 3 {
			t.Errorf("got %v failed attempts in the metrics (%v), want 3", pb.GetCounter().GetValue(), err)
		}
		r.Ensure(tg) // 44s after giving up: still cooling off
		if st, _ := r.Status("acct-1"); st.State != StateFailed {
			t.Errorf("Ensure during the cool-off: got %s, want failed", st.State)
		}
		time.Sleep(20 * time.Second)
		if st := r.start(tg, false); st.State != StateRunning {
			t.Errorf("Ensure after the cool-off: got %s, want running", st.State)
		}
	})
}

// TestReleasedWorkerLeavesNoBackoff: a login whose worker run is ended on
// purpose (handed over to another replica, lease lost, restarted) is
// abandoned at once, whether an attempt runs or the back-off waits; it is not
// counted as a failure, and when the account comes back logged out, Ensure
// starts a login at once instead of cooling off.
func TestReleasedWorkerLeavesNoBackoff(t *testing.T) {
	bin := browsertest.Chromium(t)
	tests := []struct {
		name         string
		give         func(ctx context.Context) (string, error) // the worker's login URL answer
		wantFailures float64
	}{
		{"during an attempt", func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }, 0},
		{"during the back-off", func(context.Context) (string, error) { return "", errors.New("worker busy") }, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := metrics.New(prometheus.NewRegistry())
				r, err := NewRunner(Config{Chromium: bin, Backoff: 5 * time.Second, Metrics: m}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				released := make(chan struct{})
				tg := supervisor.LoginTarget{
					Instance: "acct-1",
					Account:  worker.Account{Username: "user", Password: "pass-word"},
					LoginURL: tt.give,
					Confirm:  func(context.Context) (bool, error) { return false, nil },
					Released: released,
				}
				r.Ensure(tg)
				time.Sleep(2 * time.Second)
				close(released)
				synctest.Wait()
				st, _ := r.Status("acct-1")
				if st.State != StateIdle || st.Attempts != 1 || !strings.Contains(st.LastError, "abandoned") {
					t.Errorf("got %+v, want idle after 1 attempt, abandoned", st)
				}
				if ended := st.FinishedAt.Sub(*st.StartedAt); ended != 2*time.Second {
					t.Errorf("the login ended %s after it started, want 2s (when the worker was released)", ended)
				}
				var pb dto.Metric
				if err := m.LoginAttempts.WithLabelValues("failure").Write(&pb); err != nil || pb.GetCounter().GetValue() != tt.wantFailures {
					t.Errorf("got %v failed attempts in the metrics (%v), want %v", pb.GetCounter().GetValue(), err, tt.wantFailures)
				}
				// The account comes back logged out on a new worker run.
				tg.Released = make(chan struct{})
				if st := r.start(tg, false); st.State != StateRunning {
					t.Errorf("Ensure after the release: got %s, want running", st.State)
				}
			})
		})
	}
}
