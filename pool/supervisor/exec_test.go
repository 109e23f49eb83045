package supervisor_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// The supervisor against real processes: the ExecLauncher starts this test
// binary again as a small worker (as os/exec's own tests do), and a driver
// of a few lines talks to it. What the worker does wrong is said in its
// arguments.

// helperEnv makes the test binary the helper worker instead of running
// tests (TestMain).
const helperEnv = "SUPERVISOR_TEST_HELPER_WORKER"

// helperWorker is the helper worker's whole program. It listens on -port
// and answers each "status" line with "logged-in", until SIGINT. -mode
// hang never listens; -mode deaf ignores SIGINT (only SIGKILL ends it).
func helperWorker(args []string) int {
	fs := flag.NewFlagSet("helper-worker", flag.ContinueOnError)
	port := fs.Int("port", 0, "the port to listen on")
	mode := fs.String("mode", "serve", "serve, hang or deaf")
	stdio := fs.Bool("stdio", false, "speak on stdin and stdout instead of a port (stdio_test.go)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *stdio {
		return stdioHelper(*mode)
	}
	stop := make(chan os.Signal, 1)
	switch *mode {
	case "deaf":
		signal.Ignore(syscall.SIGINT)
	default:
		signal.Notify(stop, syscall.SIGINT)
	}
	if *mode == "hang" {
		<-stop
		return 0
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(*port))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					if sc.Text() == "status" {
						fmt.Fprintln(c, "logged-in")
					}
				}
			}()
		}
	}()
	<-stop // a deaf worker never gets it: it runs until SIGKILL
	return 0
}

// helperDriver starts the helper worker (bin, when set, instead: a worker
// binary that is not there) and connects to it.
type helperDriver struct {
	mode string
	bin  string
}

func (d helperDriver) Command(ep worker.Endpoint) []string {
	bin := d.bin
	if bin == "" {
		bin = os.Args[0]
	}
	argv := []string{bin, "-port", strconv.Itoa(ep.Port)}
	if d.mode != "" {
		argv = append(argv, "-mode", d.mode)
	}
	return argv
}

func (d helperDriver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(ep.Port)))
	if err != nil {
		return nil, err
	}
	return &lineBackend{conn: c, r: bufio.NewReader(c)}, nil
}

// lineBackend asks the helper worker for its status over one connection.
type lineBackend struct {
	noTurns
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
}

func (b *lineBackend) Status(ctx context.Context) (worker.AuthState, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d, ok := ctx.Deadline(); ok {
		_ = b.conn.SetDeadline(d)
	}
	if _, err := fmt.Fprintln(b.conn, "status"); err != nil {
		return worker.AuthState{}, err
	}
	line, err := b.r.ReadString('\n')
	if err != nil {
		return worker.AuthState{}, err
	}
	return worker.AuthState{LoggedIn: strings.TrimSpace(line) == "logged-in"}, nil
}

// noTurns are a helper worker's answers to all but its health checks.
type noTurns struct{}

func (noTurns) Start(context.Context, *chat.Turn) (chat.Answer, error) {
	return nil, errors.New("the helper worker takes no turns")
}
func (noTurns) Capabilities() worker.Capabilities { return worker.Capabilities{} }
func (noTurns) Models(context.Context) ([]chat.Model, error) {
	return nil, worker.ErrUnsupported
}
func (noTurns) RawModels(context.Context) (json.RawMessage, []chat.Model, error) {
	return nil, nil, worker.ErrUnsupported
}
func (noTurns) LoginURL(context.Context) (string, error)    { return "", worker.ErrUnsupported }
func (noTurns) DeleteSession(context.Context, string) error { return worker.ErrUnsupported }
func (b *lineBackend) Close() error                         { return b.conn.Close() }

// execWorker is a worker config with test-speed timings.
func execWorker(t *testing.T, name string) supervisor.WorkerConfig {
	return supervisor.WorkerConfig{Name: name, Account: worker.Account{Name: name}, WorkDir: t.TempDir(),
		StartTimeout: 10 * time.Second, HealthInterval: 200 * time.Millisecond, HealthTimeout: time.Second,
		BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, StopGrace: 2 * time.Second}
}

// startExec runs the supervisor over real helper processes until the test
// ends.
func startExec(t *testing.T, drv helperDriver, workers ...supervisor.WorkerConfig) *supervisor.Supervisor {
	t.Helper()
	return startExecWith(t, drv, workers...)
}

// startExecWith is startExec with any driver.
func startExecWith(t *testing.T, drv worker.Driver, workers ...supervisor.WorkerConfig) *supervisor.Supervisor {
	t.Helper()
	launcher := &supervisor.ExecLauncher{Env: []string{helperEnv + "=1"}}
	s := supervisor.New(supervisor.Config{}, workers, drv, launcher, nil, slog.New(slog.DiscardHandler))
	s.Start(context.Background())
	t.Cleanup(func() {
		s.Shutdown()
		launcher.Close()
	})
	return s
}

func status(s *supervisor.Supervisor, name string) supervisor.Status {
	w, _ := s.Worker(name)
	return w.Status()
}

func allReady(s *supervisor.Supervisor) bool {
	for _, w := range s.Workers() {
		if w.Status().State != supervisor.StateReady {
			return false
		}
	}
	return true
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func TestKilledWorkerIsReplaced(t *testing.T) {
	s := startExec(t, helperDriver{}, execWorker(t, "w1"), execWorker(t, "w2"))
	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool { return allReady(s) })
	old := status(s, "w1")
	if old.PID == 0 || old.Backend == nil {
		t.Fatalf("ready instance without a pid or a backend: %+v", old)
	}
	if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 5*time.Second, "w1 out of rotation", func() bool { return status(s, "w1").State != supervisor.StateReady })
	testenv.WaitFor(t, 10*time.Second, "w1 back with a new pid", func() bool {
		st := status(s, "w1")
		return st.State == supervisor.StateReady && st.PID != 0 && st.PID != old.PID
	})
	if st := status(s, "w1"); st.Restarts < 1 || st.Seq <= old.Seq {
		t.Errorf("after a kill: restarts %d, report %d after %d; want a restart and newer reports", st.Restarts, st.Seq, old.Seq)
	}
	if st := status(s, "w2"); st.Restarts != 0 {
		t.Errorf("w2 restarted %d times: a kill of w1 touched it", st.Restarts)
	}
}

// A worker binary that is not there: a few starts with backoff, each saying
// what to fix, then the worker is marked failed with the reason and is not
// started again until a restart asks.
func TestMissingBinaryIsMarkedFailed(t *testing.T) {
	wc := execWorker(t, "w1")
	wc.FailAfter = 3
	s := startExec(t, helperDriver{bin: "/nonexistent/lingma-worker"}, wc)
	testenv.WaitFor(t, 10*time.Second, "failed with the reason", func() bool {
		st := status(s, "w1")
		return st.State == supervisor.StateFailed && strings.Contains(st.LastError, "no such file") &&
			strings.Contains(st.LastError, "POOLGATE_WORKER_BIN")
	})
	n := status(s, "w1").Restarts
	time.Sleep(2 * time.Second) // two backoff caps
	if st := status(s, "w1"); st.Restarts != n || st.State != supervisor.StateFailed {
		t.Errorf("after failing: %s with %d restarts, was %d; want it left failed", st.State, st.Restarts, n)
	}
	w, _ := s.Worker("w1")
	w.Restart()
	testenv.WaitFor(t, 5*time.Second, "started again on the restart", func() bool { return status(s, "w1").Restarts > n })
}

func TestWorkerThatNeverGetsReadyIsKilledAndRetried(t *testing.T) {
	wc := execWorker(t, "w1")
	wc.StartTimeout = time.Second
	s := startExec(t, helperDriver{mode: "hang"}, wc)
	var pid int
	testenv.WaitFor(t, 5*time.Second, "a started pid", func() bool {
		pid = status(s, "w1").PID
		return pid != 0
	})
	testenv.WaitFor(t, 5*time.Second, "start timeout", func() bool {
		return strings.Contains(status(s, "w1").LastError, "not ready within")
	})
	testenv.WaitFor(t, 3*time.Second, "the stuck process killed", func() bool { return !alive(pid) })
}

func TestShutdownLeavesNoProcess(t *testing.T) {
	deaf := execWorker(t, "deaf")
	deaf.StopGrace = 300 * time.Millisecond
	launcher := &supervisor.ExecLauncher{Env: []string{helperEnv + "=1"}}
	defer launcher.Close()
	s := supervisor.New(supervisor.Config{}, []supervisor.WorkerConfig{execWorker(t, "w1"), execWorker(t, "w2")}, helperDriver{}, launcher, nil, slog.New(slog.DiscardHandler))
	d := supervisor.New(supervisor.Config{}, []supervisor.WorkerConfig{deaf}, helperDriver{mode: "deaf"}, launcher, nil, slog.New(slog.DiscardHandler))
	s.Start(context.Background())
	d.Start(context.Background())
	testenv.WaitFor(t, 20*time.Second, "ready instances", func() bool { return allReady(s) && allReady(d) })
	var pids []int
	for _, sup := range []*supervisor.Supervisor{s, d} {
		for _, w := range sup.Workers() {
			pids = append(pids, w.Status().PID)
		}
	}
	s.Shutdown()
	start := time.Now()
	d.Shutdown() // SIGINT is ignored: SIGKILL after the grace
	if took := time.Since(start); took < deaf.StopGrace {
		t.Errorf("a worker that ignores SIGINT was gone after %s, before its %s grace", took, deaf.StopGrace)
	}
	for _, pid := range pids {
		if err := syscall.Kill(-pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process group %d still exists after shutdown (kill -0: %v)", pid, err)
		}
	}
	for _, sup := range []*supervisor.Supervisor{s, d} {
		for _, w := range sup.Workers() {
			if st := w.Status(); st.State != supervisor.StateStopped || st.Backend != nil || st.PID != 0 {
				t.Errorf("%s after shutdown: %s, pid %d, backend %v; want stopped, none", st.Name, st.State, st.PID, st.Backend)
			}
		}
	}
}
