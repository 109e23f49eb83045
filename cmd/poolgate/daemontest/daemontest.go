// Package daemontest starts the poolgate binary as a test's daemon (a free
// loopback listener, a temporary data dir, the bundled simulator unless the
// test names a worker) and stops it with the test. It sits beside the wiring
// (cmd/poolgate) rather than in internal/testenv: what it starts is the whole
// house, and internal/ is the ground floor. The tests of the daemon, the
// admin API, the docs, the hostile suite and the benchmarks use it; the
// binary is testenv.PoolgateBin's.
package daemontest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// Daemon is a poolgate process started by a test.
type Daemon struct {
	URL  string
	Addr string
	cmd  *exec.Cmd
	log  *testenv.Buffer
	done chan struct{}
	err  error
}

// StartDaemon runs the poolgate binary with env (KEY=VALUE; a free loopback
// POOLGATE_LISTEN and a temp POOLGATE_DATA_DIR are added unless given) and
// waits until /healthz answers. Unless env names a worker binary
// (POOLGATE_WORKER_BIN, or the Python gateway's LINGMA_BIN) or a simulate
// setting of its own, POOLGATE_SIMULATE=true is added: most tests configure
// keys or accounts on the bundled simulator, which the daemon's default
// (auto) refuses; the tests of that default pass POOLGATE_SIMULATE=auto. The
// simulator obeys the prompts' [[sim:...]] directives (POOLGATE_SIM_DIRECTIVES=true)
// unless env says otherwise. The process is stopped (SIGTERM, then
// SIGKILL) at cleanup; its log is printed if the test failed.
func StartDaemon(t testing.TB, env ...string) *Daemon {
	t.Helper()
	return StartDaemonArgs(t, nil, env...)
}

// StartDaemonArgs is StartDaemon with command-line arguments (a -config
// file).
func StartDaemonArgs(t testing.TB, args []string, env ...string) *Daemon {
	t.Helper()
	return startDaemon(t, append([]string{testenv.PoolgateBin(t)}, args...), env)
}

// StartDaemonNoFile is StartDaemon for a daemon whose open-file limit is
// nofile, soft and hard: prlimit sets it on the daemon's process before it
// starts (the test's own limit is left alone), so the daemon sees it as it
// would on a machine that allows no more.
func StartDaemonNoFile(t testing.TB, nofile int, env ...string) *Daemon {
	t.Helper()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("this test starts the daemon under a low open-file limit with prlimit: apt-get install util-linux")
	}
	return startDaemon(t, []string{prlimit, fmt.Sprintf("--nofile=%d:%d", nofile, nofile), "--", testenv.PoolgateBin(t)}, env)
}

// startDaemon runs argv (the daemon, or a command that executes it in its
// place, so that its pid is the daemon's) as StartDaemon describes.
func startDaemon(t testing.TB, argv []string, env []string) *Daemon {
	t.Helper()
	has := func(k string) bool {
		return slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	}
	if !has("POOLGATE_LISTEN") {
		env = append(env, fmt.Sprintf("POOLGATE_LISTEN=127.0.0.1:%d", testenv.FreePort(t)))
	}
	if !has("POOLGATE_DATA_DIR") {
		env = append(env, "POOLGATE_DATA_DIR="+t.TempDir())
	}
	if !has("POOLGATE_SIMULATE") && !has("POOLGATE_WORKER_BIN") && !has("LINGMA_BIN") {
		env = append(env, "POOLGATE_SIMULATE=true")
	}
	if !has("POOLGATE_SIM_DIRECTIVES") {
		env = append(env, "POOLGATE_SIM_DIRECTIVES=true") // the tests steer the simulator with [[sim:...]]
	}
	d := &Daemon{log: &testenv.Buffer{}, done: make(chan struct{})}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "POOLGATE_LISTEN="); ok {
			d.Addr = v
		}
	}
	d.URL = "http://" + d.Addr
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Env = append(cleanEnv(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start poolgate: %v", err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		d.Stop(t, 20*time.Second)
		if t.Failed() {
			t.Logf("poolgate log:\n%s", d.Log())
		}
	})
	// A failed start prints the daemon's log (the cleanup above).
	testenv.WaitFor(t, 15*time.Second, "poolgate to listen on "+d.Addr, func() bool {
		select {
		case <-d.done:
			t.Fatalf("poolgate exited at start (%v)", d.err)
		default:
		}
		c, err := net.DialTimeout("tcp", d.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return d
}

// cleanEnv is the test's environment without POOLGATE_ settings, so a
// developer's shell can't change what a test starts.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POOLGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// Log returns what the daemon logged so far.
func (d *Daemon) Log() string { return d.log.String() }

// Pid returns the daemon's process id.
func (d *Daemon) Pid() int { return d.cmd.Process.Pid }

// Done is closed when the process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// ExitErr is the process's exit error, valid after Done.
func (d *Daemon) ExitErr() error { return d.err }

// Stop sends SIGTERM and waits up to grace, then kills the process group.
func (d *Daemon) Stop(t testing.TB, grace time.Duration) {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(grace):
		t.Errorf("poolgate did not exit within %s of SIGTERM", grace)
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		<-d.done
	}
}

// WaitReady polls /readyz until it answers 200.
func (d *Daemon) WaitReady(t testing.TB, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, "poolgate to answer /readyz with 200", func() bool {
		resp, err := http.Get(d.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// GetJSON fetches path with an optional Bearer token and decodes into v.
func (d *Daemon) GetJSON(t testing.TB, path, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, d.URL+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: decode: %v", path, err)
		}
	}
	return resp.StatusCode
}
