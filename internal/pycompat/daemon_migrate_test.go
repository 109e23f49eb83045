package pycompat_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// oldTree is a Python gateway deployment as it lies on disk: its .env, the
// work dir of account acct-1 under LINGMA_WORK_DIR (logged in: cache/id and
// cache/user, beside logs), and account acct-2 known only by the plain
// session bundle in its LINGMA_ACCOUNTS entry (the export of a work dir
// from another host).
type oldTree struct {
	root, env, workDir, lingmaBin string
	vars                          []string // the .env's settings, KEY=VALUE
}

// pythonAccounts are the two accounts of the old deployment.
const pythonAdminToken, pythonAPIKey = "adm-old", "sk-old"

func newOldTree(t *testing.T) oldTree {
	t.Helper()
	root := t.TempDir()
	o := oldTree{root: root, env: filepath.Join(root, ".env"), workDir: filepath.Join(root, "lingma-work")}
	// The simulator, started the way a real Lingma binary is; it lets the
	// two accounts' passwords log in on its login page.
	o.lingmaBin = filepath.Join(t.TempDir(), "lingma")
	script := "#!/bin/sh\nSIMWORKER_ACCOUNTS=u1:pw1,u2:pw2 exec '" + testenv.PoolgateBin(t) + "' simworker \"$@\"\n"
	if err := os.WriteFile(o.lingmaBin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.LoggedInWorkDir(t, filepath.Join(o.workDir, "acct-1"), "u1")
	exported := filepath.Join(t.TempDir(), "exported")
	testenv.LoggedInWorkDir(t, exported, "u2")
	accts, _ := json.Marshal([]map[string]string{
		{"name": "acct-1", "username": "u1", "password": "pw1"},
		{"name": "acct-2", "username": "u2", "password": "pw2", "session_bundle": testenv.PackWorkDir(t, exported)},
	})
	o.vars = []string{
		"API_KEYS=" + pythonAPIKey,
		"ADMIN_TOKEN=" + pythonAdminToken,
		"METRICS_PUBLIC=true",
		"LINGMA_BIN=" + o.lingmaBin,
		"LINGMA_WORK_DIR=" + o.workDir,
		"LINGMA_ACCOUNTS='" + string(accts) + "'",
		"LINGMA_STARTUP_TIMEOUT=20",
		"LINGMA_RPC_TIMEOUT=5",
		"GATEWAY_MAX_IN_FLIGHT=8",
		"GATEWAY_QUEUE_TIMEOUT_SEC=30",
		"SESSION_CACHE_TTL_SEC=1800",
		"AUTO_LOGIN_ENABLED=false",
		"LOG_LEVEL=INFO",
	}
	env := "# the Python gateway's settings\n" + strings.Join(o.vars, "\n") + "\n"
	if err := os.WriteFile(o.env, []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	return o
}

func runMigrate(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	// The real binary, so the subcommand's dispatch in cmd/poolgate is covered
	// too; an empty environment, as before the move.
	cmd := exec.Command(testenv.PoolgateBin(t), append([]string{"migrate"}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = []string{}, &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestMigrateAnOldDeployment: migrate prints a configuration that loads,
// with python_compat on; copies acct-1's work dir (the old one stays, so the
// Python gateway can still start on it) and installs acct-2's plain bundle;
// and poolgate started on the result serves both accounts with no login.
func TestMigrateAnOldDeployment(t *testing.T) {
	o := newOldTree(t)
	data := filepath.Join(t.TempDir(), "data")
	cfgPath := filepath.Join(t.TempDir(), "poolgate.yaml")
	_, report := runMigrate(t, "-env-file", o.env, "-data-dir", data, "-o", cfgPath)
	for _, want := range []string{"acct-1: copied " + filepath.Join(o.workDir, "acct-1"), "acct-2: plain session bundle installed",
		"API_KEYS (Python gateway setting) read as api_keys", "python_compat: true is set", "\nbundle_key: "} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, f := range []string{"workers/acct-1/cache/user", "workers/acct-1/logs/lingma.log", "workers/acct-2/cache/user",
		"workers/acct-2/cache/id", "migrate.json"} {
		if _, err := os.Stat(filepath.Join(data, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(o.workDir, "acct-1", "cache", "user")); err != nil {
		t.Errorf("the old work dir of acct-1 lost its login (%v): a copy leaves it", err)
	}
	doc, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "session_bundle") || strings.Contains(string(doc), "work_dir") {
		t.Errorf("the config still carries what migrate brought over:\n%s", doc)
	}
	cfg, _, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatalf("the migrated config does not load: %v\n%s", err, doc)
	}
	if cfg.WorkerBin != o.lingmaBin || cfg.AdminToken != pythonAdminToken || cfg.QueueTimeout != 30*time.Second ||
		cfg.SessionCacheTTL != 30*time.Minute || len(cfg.Accounts) != 2 || cfg.AutoLogin || !cfg.MetricsPublic || !cfg.PythonCompat {
		t.Errorf("migrated config %+v\n%s", cfg, doc)
	}

	d := daemontest.StartDaemonArgs(t, []string{"-config", cfgPath}, "POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_SIMULATE=auto",
		"POOLGATE_DATA_DIR="+data) // the config names it too; testenv would add a temp dir of its own
	testenv.WaitForNoError(t, 30*time.Second, "both accounts ready without a login", func() error {
		snap := poolState(t, d, pythonAdminToken)
		for _, in := range snap.Instances {
			if in.State != supervisor.StateReady {
				return fmt.Errorf("instances %+v", snap.Instances)
			}
		}
		return nil
	})
}
