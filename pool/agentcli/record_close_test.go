package agentcli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// A worker that exits at start (the simulated CLI refuses an option it
// does not know) fails its driver's Connect; the transcript that start
// opened is closed with it, so a worker failing its starts for hours holds
// no file per start.
func TestFailedStartClosesItsTranscript(t *testing.T) {
	dir := t.TempDir()
	acct := account(t, "w1", "sk-ant-demo")
	acct.Account.Args = []string{"--no-such-option"}
	p := startPool(t, func(c *agentcli.Config) { c.Record, c.RecordDir = true, dir }, acct)
	testenv.WaitFor(t, 30*time.Second, "w1 failed", func() bool { return p.status("w1").State == supervisor.StateFailed })
	files, _ := filepath.Glob(filepath.Join(dir, "w1", "*.jsonl"))
	if len(files) < 2 {
		t.Fatalf("%d transcripts, want one for each failed start", len(files))
	}
	if open := openUnder(t, dir); len(open) > 0 {
		t.Errorf("%d of %d transcripts of failed starts still open: %v", len(open), len(files), open)
	}
}

// openUnder lists the files under dir this process holds open.
func openUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, dir) {
			out = append(out, target)
		}
	}
	return out
}
