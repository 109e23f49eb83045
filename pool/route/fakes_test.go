package route

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// The pool's tests run the real supervisor over fake workers
// (supervisortest): the pool sees its workers only through their reports,
// as in production.

// startFake runs a pool over the real supervisor with f's workers until the
// test ends.
func startFake(t testing.TB, cfg Config, f *supervisortest.Workers, wcs []supervisor.WorkerConfig, m *metrics.Metrics) (*Pool, *supervisor.Supervisor) {
	t.Helper()
	p := New(cfg, m, slog.New(slog.DiscardHandler))
	sup := supervisor.New(p.Watch(supervisor.Config{}), supervisortest.Drive(f, wcs), f, m, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	t.Cleanup(func() {
		now, stop := context.WithCancel(context.Background())
		stop()
		p.Shutdown(now) // the test's slots may still be held: don't wait for them
		cancel()
		sup.Shutdown()
	})
	return p, sup
}

// testPool is a pool of ready fake workers that answer every turn "ok".
func testPool(t testing.TB, cfg Config, names ...string) (*Pool, *supervisor.Supervisor, *supervisortest.Workers) {
	t.Helper()
	f := supervisortest.New()
	p, sup := startFake(t, cfg, f, supervisortest.Configs(t, false, names...), nil)
	waitReady(t, p, names...)
	return p, sup, f
}

// waitReady waits until the pool can pick each named instance.
func waitReady(t testing.TB, p *Pool, names ...string) {
	t.Helper()
	testenv.WaitFor(t, 5*time.Second, "ready instances", func() bool {
		for _, n := range names {
			if !p.Serves(n) {
				return false
			}
		}
		return true
	})
}
