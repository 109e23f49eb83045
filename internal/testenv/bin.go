package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// PoolgateBin returns the path of a poolgate binary for tests that spawn real
// worker processes (`poolgate simworker ...`) or the daemon itself. `make
// test` builds it once and passes it as POOLGATE_TEST_BIN; without that, the
// binary is built here once per test process.
func PoolgateBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("POOLGATE_TEST_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("POOLGATE_TEST_BIN=%s: %v (run 'make test', which builds it)", p, err)
		}
		return p
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "poolgate-testbin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "poolgate")
		cmd := exec.Command("go", "build", "-o", binPath, "github.com/poolgate/poolgate/cmd/poolgate")
		cmd.Stderr = os.Stderr
		binErr = cmd.Run()
	})
	if binErr != nil {
		t.Fatalf("build poolgate for the test: %v", binErr)
	}
	return binPath
}
