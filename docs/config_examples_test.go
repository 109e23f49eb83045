package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/worker"
)

// A ```yaml config block is a whole configuration file: it loads as the
// daemon loads one (strict keys, validation), and every driver it names,
// at the top or on an account, is a kind the daemon runs.
func TestConfigBlocksLoad(t *testing.T) {
	found := 0
	for _, p := range pages(t) {
		for _, b := range blocks(p) {
			if b.lang != "yaml" || !slices.Contains(b.tags, "config") {
				continue
			}
			found++
			t.Run(b.String(), func(t *testing.T) { checkConfigBlock(t, b) })
		}
	}
	if found == 0 {
		t.Fatal("no ```yaml config blocks found in README.md and docs/")
	}
}

var passwordEnv = regexp.MustCompile(`password_env:\s*(\w+)`)

func checkConfigBlock(t *testing.T, b block) {
	path := filepath.Join(t.TempDir(), "poolgate.yaml")
	if err := os.WriteFile(path, []byte(b.body), 0o600); err != nil {
		t.Fatal(err)
	}
	// The passwords the example takes from the environment, and a data
	// dir of the test's own.
	env := []string{"POOLGATE_DATA_DIR=" + t.TempDir()}
	for _, m := range passwordEnv.FindAllStringSubmatch(b.body, -1) {
		env = append(env, m[1]+"=example-password")
	}
	cfg, _, err := config.Load(path, env)
	if err != nil {
		t.Fatalf("%s does not load: %v", b, err)
	}
	names := []string{cfg.Driver}
	for _, a := range cfg.Accounts {
		if a.Driver != "" {
			names = append(names, a.Driver)
		}
	}
	for _, name := range names {
		if _, ok := worker.ByName(drivers.Kinds(), name); !ok {
			t.Errorf("%s names the driver %q, which is no kind the daemon runs", b, name)
		}
	}
}
