package sim

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// buildSimworker builds cmd/simworker, the binary the supervisor spawns.
func buildSimworker(t *testing.T) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build cmd/simworker: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "simworker")
	out, err := exec.Command(gobin, "build", "-o", bin, "github.com/poolgate/poolgate/cmd/simworker").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/simworker: %v\n%s", err, out)
	}
	return bin
}

// spawn starts the binary the way the supervisor does and returns a harness
// for it and a channel with its exit error.
func spawn(t *testing.T, bin string) (*harness, *exec.Cmd, chan error) {
	t.Helper()
	h := &harness{dir: t.TempDir(), socket: testenv.FreePort(t), http: testenv.FreePort(t), log: &testenv.Buffer{}}
	cmd := exec.Command(bin, "start", "--directives", "--transportType=websocket", "--workDir="+h.dir,
		"--socketPort="+strconv.Itoa(h.socket), "--httpPort="+strconv.Itoa(h.http), "--logged-in")
	cmd.Stderr = h.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start simworker: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	poll(t, "simworker listening", func() bool { return strings.Contains(h.log.String(), "simworker listening") })
	return h, cmd, exited
}

func exitCode(t *testing.T, exited chan error) int {
	t.Helper()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(wait):
		t.Fatal("simworker did not exit")
		return -1
	}
}

func TestProcessCrashAndSignal(t *testing.T) {
	bin := buildSimworker(t)

	h, _, exited := spawn(t, bin)
	c := dial(t, h)
	c.ask("r1", "", "a b [[sim:crash]]", false)
	c.reply(c.nextAnswer())
	if code := exitCode(t, exited); code != 3 {
		t.Errorf("crash exit code = %d, want 3\n%s", code, h.log.String())
	}

	h, cmd, exited := spawn(t, bin)
	var st authStatus
	dial(t, h).result("auth/status", map[string]any{}, &st)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, exited); code != 0 || st.Status != 2 {
		t.Errorf("SIGTERM exit code = %d (auth %d), want 0 (auth 2)\n%s", code, st.Status, h.log.String())
	}
}
