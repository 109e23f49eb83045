package pool_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/internal/tokens"
	"github.com/poolgate/poolgate/pool"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// fixture is a pool of real simworker processes under the real supervisor.
type fixture struct {
	sup    *supervisor.Supervisor
	pool   *pool.Pool
	router *pool.Router
	cancel context.CancelFunc
}

func quietLog() *slog.Logger {
	if os.Getenv("POOLGATE_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// fastWorker returns a worker config with test-speed timings.
func fastWorker(t *testing.T, name string) supervisor.WorkerConfig {
	return supervisor.WorkerConfig{Name: name, Account: supervisor.Account{Name: name, Env: []string{"SIMWORKER_ACCOUNTS=u-" + name + ":pw"}},
		WorkDir: t.TempDir(), StartTimeout: 10 * time.Second, HealthInterval: 200 * time.Millisecond,
		HealthTimeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, StopGrace: 2 * time.Second}
}

func startPool(t *testing.T, command []string, cfg pool.Config, scfg supervisor.Config, workers ...supervisor.WorkerConfig) *fixture {
	t.Helper()
	drv := lingma.New(lingma.Config{Command: command, ExtraArgs: []string{"--logged-in"}})
	launcher := &supervisor.ExecLauncher{}
	sup := supervisor.New(scfg, workers, drv, launcher, nil, quietLog())
	p := pool.New(cfg, sup, nil, quietLog())
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	f := &fixture{sup: sup, pool: p, cancel: cancel,
		router: pool.NewRouter(pool.RouterConfig{Retries: 2, Count: tokens.Count}, p, nil, nil, quietLog())}
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		p.Shutdown(sctx)
		sup.Shutdown()
		cancel()
		f.router.Wait()
		launcher.Close()
	})
	return f
}

func simCommand(t *testing.T) []string { return []string{testenv.PoolgateBin(t), "simworker"} }

func allReady(p *pool.Pool) bool {
	for _, in := range p.Snapshot().Instances {
		if in.State != supervisor.StateReady {
			return false
		}
	}
	return true
}

func ask(t *testing.T, r *pool.Router, prompt string, stream bool) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ch, err := r.Chat(ctx, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: prompt}}, Stream: stream})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for ev := range ch {
		switch ev.Type {
		case chat.EventText:
			b.WriteString(ev.Text)
		case chat.EventError:
			return b.String(), ev.Err
		}
	}
	return b.String(), nil
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestPoolServesAndReplacesAKilledWorker(t *testing.T) {
	f := startPool(t, simCommand(t), pool.Config{}, supervisor.Config{}, fastWorker(t, "w1"), fastWorker(t, "w2"))
	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool { return allReady(f.pool) })

	for _, stream := range []bool{false, true} {
		got, err := ask(t, f.router, "hello pool", stream)
		if err != nil || got != "You said: hello pool" {
			t.Fatalf("stream=%v: got %q, %v; want the simulator's echo", stream, got, err)
		}
	}

	old := instanceOf(f.pool, "w1")
	if old.PID == 0 {
		t.Fatal("ready instance without a pid")
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "w1 out of rotation", func() bool { return instanceOf(f.pool, "w1").State != supervisor.StateReady })
	testenv.WaitFor(t, 10*time.Second, "w1 back with a new pid", func() bool {
		in := instanceOf(f.pool, "w1")
		return in.State == supervisor.StateReady && in.PID != 0 && in.PID != old.PID
	})
	if in := instanceOf(f.pool, "w1"); in.Restarts < 1 {
		t.Errorf("restarts = %d after a kill, want >= 1", in.Restarts)
	}
	if got, err := ask(t, f.router, "after restart", false); err != nil || got != "You said: after restart" {
		t.Errorf("after restart: got %q, %v", got, err)
	}
}

func TestMissingBinaryBacksOffWithAClearError(t *testing.T) {
	f := startPool(t, []string{"/nonexistent/lingma-worker"}, pool.Config{NoInstanceWait: 300 * time.Millisecond}, supervisor.Config{}, fastWorker(t, "w1"))
	testenv.WaitFor(t, 5*time.Second, "backoff with an error", func() bool {
		in := instanceOf(f.pool, "w1")
		return in.State == supervisor.StateBackoff && strings.Contains(in.LastError, "POOLGATE_WORKER_BIN")
	})
	time.Sleep(3 * time.Second)
	// Backoff doubles from 100ms to a 1s cap: about 5 tries in 3s, never a hot loop.
	if n := instanceOf(f.pool, "w1").Restarts; n > 10 {
		t.Errorf("%d restarts in 3s: the backoff is not holding", n)
	}
	if _, err := ask(t, f.router, "anyone?", false); !errors.Is(err, chat.ErrNoInstance) {
		t.Errorf("chat with no ready instance: got %v, want ErrNoInstance", err)
	}
}

func TestWorkerThatNeverGetsReadyIsKilledAndRetried(t *testing.T) {
	wc := fastWorker(t, "w1")
	wc.StartTimeout = time.Second
	// A process that runs but never listens: sh ignores the worker arguments.
	f := startPool(t, []string{"sh", "-c", "sleep 60", "sh"}, pool.Config{}, supervisor.Config{}, wc)
	var pid int
	testenv.WaitFor(t, 5*time.Second, "a started pid", func() bool {
		pid = instanceOf(f.pool, "w1").PID
		return pid != 0
	})
	testenv.WaitFor(t, 5*time.Second, "start timeout", func() bool {
		return strings.Contains(instanceOf(f.pool, "w1").LastError, "not ready within")
	})
	testenv.WaitFor(t, 3*time.Second, "the stuck process killed", func() bool { return !alive(pid) })
}

func TestShutdownLeavesNoProcess(t *testing.T) {
	f := startPool(t, simCommand(t), pool.Config{}, supervisor.Config{}, fastWorker(t, "w1"), fastWorker(t, "w2"))
	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool { return allReady(f.pool) })
	var pids []int
	for _, in := range f.pool.Snapshot().Instances {
		pids = append(pids, in.PID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f.pool.Shutdown(ctx)
	f.sup.Shutdown()
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d still exists after shutdown (kill -0: %v)", pid, err)
		}
	}
	for _, in := range f.pool.Snapshot().Instances {
		if in.State != supervisor.StateStopped {
			t.Errorf("%s is %s after shutdown, want stopped", in.Name, in.State)
		}
	}
}

func TestNonStreamTurnSurvivesAWorkerKilledMidTurn(t *testing.T) {
	f := startPool(t, simCommand(t), pool.Config{}, supervisor.Config{}, fastWorker(t, "w1"), fastWorker(t, "w2"))
	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool { return allReady(f.pool) })
	done := make(chan error, 1)
	var got string
	go func() {
		var err error
		got, err = ask(t, f.router, "slow [[sim:chunk-delay=100ms]] [[sim:words=20]]", false)
		done <- err
	}()
	var victim pool.InstanceStatus
	testenv.WaitFor(t, 5*time.Second, "a busy instance", func() bool {
		for _, in := range f.pool.Snapshot().Instances {
			if in.InFlight > 0 {
				victim = in
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // mid-answer
	if err := syscall.Kill(victim.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("non-stream turn failed although another instance was ready: %v", err)
	}
	if !strings.HasPrefix(got, "You said: slow") {
		t.Errorf("answer %q", got)
	}
}

func instanceOf(p *pool.Pool, name string) pool.InstanceStatus {
	in, _ := p.Snapshot().Instance(name)
	return in
}

// A stop sent while a drain waits for a turn (the lease was lost meanwhile)
// is not lost behind the drain: the worker stops at once, cutting the turn,
// instead of waiting out the drain.
func TestStopDuringDrainIsNotLost(t *testing.T) {
	f := startPool(t, simCommand(t), pool.Config{}, supervisor.Config{DrainTimeout: time.Minute}, fastWorker(t, "w1"))
	testenv.WaitFor(t, 15*time.Second, "ready", func() bool { return allReady(f.pool) })
	turn := make(chan error, 1)
	go func() {
		_, err := ask(t, f.router, "slow [[sim:delay=50s]]", true)
		turn <- err
	}()
	testenv.WaitFor(t, 10*time.Second, "the turn in flight", func() bool {
		in, _ := f.pool.Snapshot().Instance("w1")
		return in.InFlight == 1
	})
	if err := f.sup.Drain("w1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "draining", func() bool {
		in, _ := f.pool.Snapshot().Instance("w1")
		return in.State == supervisor.StateDraining
	})
	if err := f.sup.Stop("w1"); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "stopped before the turn or the drain ended", func() bool {
		in, _ := f.pool.Snapshot().Instance("w1")
		return in.State == supervisor.StateStopped
	})
	if err := <-turn; err == nil {
		t.Error("the turn survived a hard stop")
	}
}
