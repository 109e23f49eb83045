package qoder_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/qoder"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/pool/worker"
)

// The driver against the simulator's qoder dialect, run as real processes
// by the real supervisor: this test binary, started again with simEnv
// set, is `simworker agent-cli qoder`.

const simEnv = "QODER_TEST_SIM"

func TestMain(m *testing.M) {
	if os.Getenv(simEnv) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := sim.AgentMain(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// pool is a supervisor of simulated qodercli workers and their driver.
type pool struct {
	sup *supervisor.Supervisor
	drv *qoder.Driver
	log *testenv.Buffer
	// offModel is how many lines outside the model the test makes the
	// CLIs print.
	offModel int64
}

// account is a worker config at test speed; token is its personal access
// token ("" : none), and loggedIn stores a login in its config dir first.
func account(t *testing.T, name, token string, loggedIn bool) supervisor.WorkerConfig {
	t.Helper()
	dir := t.TempDir()
	if loggedIn {
		storeLogin(t, dir, name+"@example.com")
	}
	return supervisor.WorkerConfig{Name: name, Account: worker.Account{Name: name, Password: token,
		Env: []string{"SIMWORKER_ACCOUNTS=demo@example.com:demo"}}, WorkDir: dir, StartTimeout: 10 * time.Second,
		HealthInterval: 100 * time.Millisecond, HealthTimeout: 3 * time.Second, BackoffMin: 100 * time.Millisecond,
		BackoffMax: time.Second, StopGrace: 2 * time.Second, FailAfter: 3}
}

// storeLogin writes the simulator's stored login into a work dir, as its
// device login stores one.
func storeLogin(t *testing.T, workDir, email string) {
	t.Helper()
	auth := filepath.Join(workDir, "config", ".auth")
	if err := os.MkdirAll(auth, 0o700); err != nil {
		t.Fatal(err)
	}
	u, _ := json.Marshal(map[string]string{"uid": "u-" + email, "name": email, "email": email,
		"login_method": "device-token", "machine_id": "m-test"})
	for name, data := range map[string][]byte{"machine_id": []byte("m-test"), "user": u} {
		if err := os.WriteFile(filepath.Join(auth, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startPool runs the accounts until the test ends.
func startPool(t *testing.T, accounts ...supervisor.WorkerConfig) *pool {
	t.Helper()
	log := &testenv.Buffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	set := qoder.DefaultSettings()
	set.SystemPrompt = "test prompt"
	drv := qoder.New(set, agentcli.Config{Command: []string{os.Args[0], "qoder"}, ExtraArgs: []string{"--directives"},
		StartTimeout: 10 * time.Second, StopTimeout: 3 * time.Second, Logger: logger})
	launcher := &supervisor.ExecLauncher{Env: []string{simEnv + "=1", "PATH=" + os.Getenv("PATH")}}
	sup := supervisor.New(supervisor.Config{}, supervisortest.Drive(drv, accounts), launcher, nil, logger)
	sup.Start(context.Background())
	p := &pool{sup: sup, drv: drv, log: log}
	t.Cleanup(func() {
		sup.Shutdown()
		launcher.Close()
		st := drv.Stats()
		if n := st.Unknown.Load() + st.Unparsed.Load(); n != p.offModel {
			t.Errorf("of %d lines the CLIs printed, %d were unknown and %d unparsed", st.Lines.Load(),
				st.Unknown.Load(), st.Unparsed.Load())
		}
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	return p
}

func (p *pool) status(name string) supervisor.Status {
	w, _ := p.sup.Worker(name)
	return w.Status()
}

// await waits for the instance to reach state and returns its status.
func (p *pool) await(t *testing.T, name string, state supervisor.State) supervisor.Status {
	t.Helper()
	var st supervisor.Status
	testenv.WaitFor(t, 20*time.Second, name+" "+string(state), func() bool {
		st = p.status(name)
		return st.State == state && (state != supervisor.StateReady || st.Backend != nil)
	})
	return st
}

// result is what an answer made.
type result struct {
	text  string
	calls []chat.ToolCall
	done  chat.Event
	err   error
}

// run starts turn on be and reads its whole answer.
func run(t *testing.T, be worker.Backend, turn *chat.Turn) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := be.Start(ctx, turn)
	if err != nil {
		return result{err: err}
	}
	defer a.Close()
	var r result
	var b strings.Builder
	for {
		ev, ok := a.Next()
		if !ok {
			break
		}
		switch ev.Type {
		case chat.EventText:
			b.WriteString(ev.Text)
		case chat.EventToolCall:
			r.calls = append(r.calls, ev.ToolCall)
		case chat.EventDone:
			r.done = ev
		case chat.EventError:
			r.err = ev.Err
		}
	}
	r.text = b.String()
	return r
}

// ask is a one-message turn continuing session.
func ask(text, session string) *chat.Turn {
	return &chat.Turn{Messages: []chat.Message{{Role: chat.RoleUser, Content: text}}, SessionID: session}
}

func mustOK(t *testing.T, what string, r result) result {
	t.Helper()
	if r.err != nil || r.done.Type != chat.EventDone {
		t.Fatalf("%s: error %v, done %+v, text %q", what, r.err, r.done, r.text)
	}
	return r
}
