package login

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool"
)

// TestBackoffAndCooloff: attempts are spaced by the doubling backoff; after
// giving up, Ensure waits out the cool-off, then starts again. Each attempt
// is counted in the metrics.
func TestBackoffAndCooloff(t *testing.T) {
	bin := chromium(t)
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
		tg := pool.LoginTarget{
			Instance: "acct-1",
			Account:  pool.Account{Username: "user", Password: "pass-word"},
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
