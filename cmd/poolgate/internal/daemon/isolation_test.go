package daemon

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// TestWorkerHomes: each worker runs with a home, a temp dir and a runtime
// dir of its own under its work dir, so two workers on one host share no
// files outside their work dirs; lingma.isolate_home=false gives them
// poolgate's own.
func TestWorkerHomes(t *testing.T) {
	data := t.TempDir()
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_DATA_DIR="+data, "HOME=/nonexistent/poolgate-home")
	d.WaitReady(t, 15*time.Second)
	seen := map[string]bool{}
	for i := range 40 { // the pick follows a hash of the conversation: vary it
		c := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", fmt.Sprintf("[[sim:env]] %d", i), nil))
		inst := c.header.Get("X-Poolgate-Instance")
		dir := filepath.Join(data, "workers", inst)
		want := fmt.Sprintf("home=%s tmpdir=%s runtime=%s cwd=%s", filepath.Join(dir, "home"), filepath.Join(dir, "tmp"),
			filepath.Join(dir, "run"), dir)
		if got := content(t, c); got != want {
			t.Fatalf("%s runs with %q, want %q", inst, got, want)
		}
		if seen[inst] = true; len(seen) == 2 {
			break
		}
	}
	if len(seen) != 2 {
		t.Errorf("only %v answered", seen)
	}

	off := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_DATA_DIR="+t.TempDir(),
		"POOLGATE_LINGMA_ISOLATE_HOME=false", "HOME=/nonexistent/poolgate-home", "TMPDIR=/nonexistent/poolgate-tmp")
	off.WaitReady(t, 15*time.Second)
	got := content(t, send(t, off, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:env]]", nil)))
	if want := "home=/nonexistent/poolgate-home tmpdir=/nonexistent/poolgate-tmp "; len(got) < len(want) || got[:len(want)] != want {
		t.Errorf("without isolation the worker runs with %q, want poolgate's HOME and TMPDIR", got)
	}
}
