package agentcli_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/claudecode"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// The driver against the simulator's agent CLI mode, run as real processes
// by the real supervisor: this test binary, started again with simEnv set,
// is `simworker agent-cli` (the claude-code dialect), and the driver has
// Claude Code's profile.

const simEnv = "AGENTCLI_TEST_SIM"

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

// pool is a supervisor of simulated agent CLIs and their driver.
type pool struct {
	sup *supervisor.Supervisor
	drv *agentcli.Driver
	log *testenv.Buffer
	// offModel is how many lines outside the model the test makes the
	// CLIs print.
	offModel int64
}

// account is a worker config at test speed: password is its secret (an
// API key for the simulated CLI; "" leaves it logged out).
func account(t *testing.T, name, password string) supervisor.WorkerConfig {
	return supervisor.WorkerConfig{Name: name, Account: worker.Account{Name: name, Password: password,
		Env: []string{"SIMWORKER_ACCOUNTS=demo:demo"}}, WorkDir: t.TempDir(), StartTimeout: 10 * time.Second,
		HealthInterval: 200 * time.Millisecond, HealthTimeout: 3 * time.Second, BackoffMin: 100 * time.Millisecond,
		BackoffMax: time.Second, StopGrace: 2 * time.Second}
}

// startPool runs the accounts until the test ends; edit changes the
// driver's config first.
func startPool(t *testing.T, edit func(*agentcli.Config), accounts ...supervisor.WorkerConfig) *pool {
	t.Helper()
	log := &testenv.Buffer{}
	cfg := agentcli.Config{Profile: claudecode.Profile(claudecode.SecretAuto), Command: []string{os.Args[0], "claude-code"},
		SystemPrompt: "test prompt", StopTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	if edit != nil {
		edit(&cfg)
	}
	drv := agentcli.New(cfg)
	launcher := &supervisor.ExecLauncher{Env: []string{simEnv + "=1", "PATH=" + os.Getenv("PATH")}}
	sup := supervisor.New(supervisor.Config{}, accounts, drv, launcher, nil, slog.New(slog.NewTextHandler(log, nil)))
	sup.Start(context.Background())
	t.Cleanup(func() {
		sup.Shutdown()
		launcher.Close()
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	p := &pool{sup: sup, drv: drv, log: log}
	t.Cleanup(p.checkLines(t))
	return p
}

// checkLines fails the test if any line a simulated CLI printed was
// outside the driver's model of the protocol.
func (p *pool) checkLines(t *testing.T) func() {
	return func() {
		st := p.drv.Stats()
		if st.Unknown.Load()+st.Unparsed.Load() != p.offModel {
			t.Errorf("of %d lines the CLIs printed, %d were unknown and %d unparsed", st.Lines.Load(),
				st.Unknown.Load(), st.Unparsed.Load())
		}
	}
}

// ready waits for the instance to be ready and returns its backend.
func (p *pool) ready(t *testing.T, name string) worker.Backend {
	t.Helper()
	var be worker.Backend
	testenv.WaitFor(t, 15*time.Second, name+" ready", func() bool {
		w, _ := p.sup.Worker(name)
		st := w.Status()
		be = st.Backend
		return st.State == supervisor.StateReady && be != nil
	})
	return be
}

func (p *pool) status(name string) supervisor.Status {
	w, _ := p.sup.Worker(name)
	return w.Status()
}

// result is what an answer made.
type result struct {
	text  string
	calls []chat.ToolCall
	done  chat.Event
	err   error
	n     int // events
}

// run starts t on be and reads its whole answer.
func run(t *testing.T, be worker.Backend, turn *chat.Turn) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := be.Start(ctx, turn)
	if err != nil {
		return result{err: err}
	}
	defer a.Close()
	return read(a)
}

func read(a chat.Answer) result {
	var r result
	var b strings.Builder
	for {
		ev, ok := a.Next()
		if !ok {
			break
		}
		r.n++
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

// mustOK fails the test unless r ended cleanly.
func mustOK(t *testing.T, what string, r result) result {
	t.Helper()
	if r.err != nil || r.done.Type != chat.EventDone {
		t.Fatalf("%s: error %v, done %+v, text %q", what, r.err, r.done, r.text)
	}
	return r
}

func errorsAs[T error](err error) (T, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}
