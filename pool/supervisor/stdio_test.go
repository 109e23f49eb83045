package supervisor_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// The stdio transport against real processes: the helper worker, started
// with -stdio, speaks one line at a time on its standard input and output
// and says "ready" first; its standard error is the log's.

// stdioHelper is the helper worker's stdio mode: "ready", then an answer
// per line ("status" -> "logged-in", "env KEY" -> the variable's value),
// until its input ends. -mode exit leaves at once; -mode mute says nothing.
func stdioHelper(mode string) int {
	fmt.Fprintln(os.Stderr, "helper on stdio, mode", mode)
	switch mode {
	case "exit":
		fmt.Fprintln(os.Stderr, "bad flag: no such option")
		return 3
	case "mute":
		select {} // until killed
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd, arg, _ := strings.Cut(sc.Text(), " "); cmd {
		case "status":
			fmt.Println("logged-in")
		case "env":
			fmt.Println(os.Getenv(arg))
		default:
			fmt.Println("?")
		}
	}
	return 0
}

// stdioDriver starts the helper in stdio mode and talks to it through its
// pipes.
type stdioDriver struct{ mode string }

var _ worker.Transporter = stdioDriver{}

func (d stdioDriver) Transport() worker.Transport { return worker.TransportStdio }

func (d stdioDriver) Command(ep worker.Endpoint) []string {
	if ep.Port != 0 || ep.Stdio != nil {
		panic("a stdio worker's command is made without ports and before its pipes")
	}
	return []string{os.Args[0], "-stdio", "-mode", d.mode}
}

func (d stdioDriver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	if ep.Stdio == nil || ep.Spawn == nil {
		return nil, errors.New("no pipes or spawner for a stdio worker")
	}
	b := &pipeBackend{in: ep.Stdio.In, r: bufio.NewReader(ep.Stdio.Out), spawn: ep.Spawn}
	line := make(chan string, 1)
	go func() {
		s, _ := b.r.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "ready" {
			return nil, fmt.Errorf("the helper said %q, not ready", s)
		}
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipeBackend asks the helper over its pipes, one line at a time.
type pipeBackend struct {
	noTurns
	mu    sync.Mutex
	in    interface{ Write([]byte) (int, error) }
	r     *bufio.Reader
	spawn worker.Spawner
}

func (b *pipeBackend) ask(q string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := fmt.Fprintln(b.in, q); err != nil {
		return "", err
	}
	s, err := b.r.ReadString('\n')
	return strings.TrimSpace(s), err
}

func (b *pipeBackend) Status(context.Context) (worker.AuthState, error) {
	s, err := b.ask("status")
	return worker.AuthState{LoggedIn: s == "logged-in"}, err
}

func (b *pipeBackend) Close() error { return nil }

func TestStdioWorker(t *testing.T) {
	wc := execWorker(t, "w1")
	wc.Account.Env = []string{"ACCOUNT_VAR=from-account"}
	s := startExecWith(t, stdioDriver{mode: "serve"}, wc)
	testenv.WaitFor(t, 20*time.Second, "ready over its pipes", func() bool { return allReady(s) })
	st := status(s, "w1")
	if st.Port != 0 {
		t.Errorf("a stdio worker reports port %d, want none", st.Port)
	}
	be := st.Backend.(*pipeBackend)
	if v, err := be.ask("env ACCOUNT_VAR"); v != "from-account" || err != nil {
		t.Errorf("the worker's ACCOUNT_VAR = %q (%v), want the account's", v, err)
	}

	// A spawned process of the same worker: its own pipes, the worker's
	// environment under its own entries.
	c, err := be.spawn([]string{os.Args[0], "-stdio", "-mode", "serve"}, []string{"ACCOUNT_VAR=spawned"})
	if err != nil {
		t.Fatal(err)
	}
	cb := &pipeBackend{in: c.Stdio().In, r: bufio.NewReader(c.Stdio().Out)}
	if s, _ := cb.r.ReadString('\n'); strings.TrimSpace(s) != "ready" {
		t.Fatalf("spawned helper said %q", s)
	}
	if v, err := cb.ask("env ACCOUNT_VAR"); v != "spawned" || err != nil {
		t.Errorf("the spawned process's ACCOUNT_VAR = %q (%v), want its own entry to win", v, err)
	}
	c.Stop()
	c.Stop()
	select {
	case <-c.Exited():
	default:
		t.Error("a stopped child has not exited")
	}

	// Killed, it is replaced, with new pipes.
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "back with a new pid", func() bool {
		n := status(s, "w1")
		return n.State == supervisor.StateReady && n.PID != st.PID && n.Backend != nil
	})
	if v, err := status(s, "w1").Backend.(*pipeBackend).ask("status"); v != "logged-in" || err != nil {
		t.Errorf("the new process answers %q (%v)", v, err)
	}
}

// A stdio worker that exits at start fails with its last words; one that
// never says it is ready is killed at the start timeout.
func TestStdioWorkerStartFailures(t *testing.T) {
	wc := execWorker(t, "exits")
	wc.FailAfter = 2
	s := startExecWith(t, stdioDriver{mode: "exit"}, wc)
	testenv.WaitFor(t, 10*time.Second, "failed with the worker's last line", func() bool {
		st := status(s, "exits")
		return st.State == supervisor.StateFailed && strings.Contains(st.LastError, "no such option")
	})

	mute := execWorker(t, "mute")
	mute.StartTimeout = time.Second
	m := startExecWith(t, stdioDriver{mode: "mute"}, mute)
	var pid int
	testenv.WaitFor(t, 5*time.Second, "a started pid", func() bool {
		pid = status(m, "mute").PID
		return pid != 0
	})
	testenv.WaitFor(t, 5*time.Second, "start timeout", func() bool {
		return strings.Contains(status(m, "mute").LastError, "not ready within")
	})
	testenv.WaitFor(t, 3*time.Second, "the mute process killed", func() bool { return !alive(pid) })
}
