package login

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poolgate/poolgate/internal/browsertest"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/pool/worker/workertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait in these tests.
const wait = 30 * time.Second

// worker is one in-process simulator, logged out, reached with the Lingma
// driver as the pool would.
type simWorker struct {
	ep     worker.Endpoint
	client *lingma.Client
}

// startSim runs the simulator with the given login page variant; valid
// accounts come from SIMWORKER_ACCOUNTS (via getenv), as in production.
func startSim(t *testing.T, variant, accounts string) *simWorker {
	t.Helper()
	args := func(ep worker.Endpoint) []string {
		return []string{"start", "--transportType=websocket", "--workDir", ep.WorkDir,
			"--socketPort", strconv.Itoa(ep.Port), "--httpPort", strconv.Itoa(ep.AuxPort), "--login-page", variant}
	}
	getenv := func(k string) string {
		if k == "SIMWORKER_ACCOUNTS" {
			return accounts
		}
		return ""
	}
	ep := workertest.Start(t, "acct", args, getenv, nil, wait).Endpoint
	c := workertest.Connect[*lingma.Client](t, lingma.New(lingma.Config{}), ep, wait)
	return &simWorker{ep: ep, client: c}
}

// target is the login target of w for an account.
func (w *simWorker) target(name, user, pass string) supervisor.LoginTarget {
	return supervisor.LoginTarget{
		Instance: name,
		Account:  worker.Account{Name: name, Username: user, Password: pass},
		WorkDir:  w.ep.WorkDir,
		LoginURL: w.client.LoginURL,
		Confirm: func(ctx context.Context) (bool, error) {
			st, err := w.client.Status(ctx)
			return st.LoggedIn, err
		},
	}
}

// stats reads the simulator's counters.
func (w *simWorker) stats(t *testing.T) sim.Stats {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(w.ep.AuxPort) + "/sim/stats")
	if err != nil {
		t.Fatalf("sim stats: %v", err)
	}
	defer resp.Body.Close()
	var st sim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("sim stats: %v", err)
	}
	return st
}

// newTestRunner makes a runner with fast test timings whose browser
// profiles live in a fresh dir; at cleanup it closes the runner and fails
// the test if any process still mentions that dir (a leaked Chromium).
func newTestRunner(t *testing.T, cfg Config) (*Runner, *testenv.Buffer) {
	t.Helper()
	cfg.Chromium = browsertest.Chromium(t)
	cfg.TempDir = t.TempDir()
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = 20 * time.Second // generous: CI machines can be very busy
	}
	if cfg.LoginTimeout == 0 {
		cfg.LoginTimeout = wait
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 50 * time.Millisecond
	}
	logs := &testenv.Buffer{}
	r, err := NewRunner(cfg, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	t.Cleanup(func() {
		r.Close()
		if t.Failed() {
			t.Logf("runner log:\n%s", logs)
		}
		if procs := processesMentioning(cfg.TempDir); len(procs) > 0 {
			t.Errorf("processes left after Close: %v", procs)
		}
	})
	return r, logs
}

// processesMentioning scans /proc for live processes whose command line
// contains s.
func processesMentioning(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(s)) {
			continue
		}
		out = append(out, filepath.Base(d)+": "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return out
}

// await polls the runner until the instance's login is no longer running.
func await(t *testing.T, r *Runner, name string) Status {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute) // a bound, not an expectation
	for {
		st, ok := r.Status(name)
		if ok && st.State != StateRunning {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("login of %s still running: %+v", name, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
