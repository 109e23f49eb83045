package daemon

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// TestUnknownCommandIsRefused: a mistyped subcommand (or a stray word after
// the flags) exits with an error naming the commands; it never starts a
// gateway in its place.
func TestUnknownCommandIsRefused(t *testing.T) {
	for _, args := range [][]string{{"doctr"}, {"-env-file", "/dev/null", "migrat"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, testenv.PoolgateBin(t), args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		killed := ctx.Err() != nil
		cancel()
		if killed {
			t.Fatalf("poolgate %v ran until killed (it served instead of refusing):\n%s", args, out)
		}
		if err == nil || !strings.Contains(string(out), "unknown command") || !strings.Contains(string(out), "doctor") {
			t.Errorf("poolgate %v = %v:\n%s\nwant an error naming the commands", args, err, out)
		}
	}
}
