package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	writeLoggedIn(t, filepath.Join(o.workDir, "acct-1"), "u1")
	exported := filepath.Join(t.TempDir(), "exported")
	writeLoggedIn(t, exported, "u2")
	accts, _ := json.Marshal([]map[string]string{
		{"name": "acct-1", "username": "u1", "password": "pw1"},
		{"name": "acct-2", "username": "u2", "password": "pw2", "session_bundle": packWorkDir(t, exported)},
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

// writeLoggedIn lays out a logged-in Lingma work dir.
func writeLoggedIn(t *testing.T, dir, username string) {
	t.Helper()
	user, _ := json.Marshal(map[string]any{"username": username, "token": "tok-" + username,
		"expiresAt": time.Now().Add(24 * time.Hour).Format(time.RFC3339)})
	for name, data := range map[string][]byte{"cache/id": []byte("machine-" + username), "cache/user": user,
		"logs/lingma.log": []byte("old log\n")} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// packWorkDir is the Python gateway's export: base64 of a tar.gz of the
// whole work dir, paths relative to it.
func packWorkDir(t *testing.T, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = "./" + filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func runMigrate(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"migrate"}, args...), func() []string { return nil }, nil, &out, &errOut)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, errOut.String())
	}
	return out.String(), errOut.String()
}

// TestMigrateAnOldDeployment: migrate prints a configuration that loads,
// moves acct-1's work dir and installs acct-2's plain bundle, and poolgate
// started on the result serves both accounts with no login.
func TestMigrateAnOldDeployment(t *testing.T) {
	o := newOldTree(t)
	data := filepath.Join(t.TempDir(), "data")
	cfgPath := filepath.Join(t.TempDir(), "poolgate.yaml")
	_, report := runMigrate(t, "-env-file", o.env, "-data-dir", data, "-o", cfgPath)
	for _, want := range []string{"acct-1: moved " + filepath.Join(o.workDir, "acct-1"), "acct-2: plain session bundle installed",
		"API_KEYS (Python gateway setting) read as api_keys"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if _, err := os.Stat(filepath.Join(o.workDir, "acct-1")); !os.IsNotExist(err) {
		t.Errorf("the old work dir of acct-1 is still there (%v): it should have moved", err)
	}
	for _, f := range []string{"acct-1/cache/user", "acct-1/logs/lingma.log", "acct-2/cache/user", "acct-2/cache/id"} {
		if _, err := os.Stat(filepath.Join(data, "workers", f)); err != nil {
			t.Errorf("workers/%s: %v", f, err)
		}
	}
	doc, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "session_bundle") || strings.Contains(string(doc), "work_dir") {
		t.Errorf("the config still carries what migrate moved:\n%s", doc)
	}
	cfg, _, err := config.Load(cfgPath, nil)
	if err != nil {
		t.Fatalf("the migrated config does not load: %v\n%s", err, doc)
	}
	if cfg.WorkerBin != o.lingmaBin || cfg.AdminToken != pythonAdminToken || cfg.QueueTimeout != 30*time.Second ||
		cfg.SessionCacheTTL != 30*time.Minute || len(cfg.Accounts) != 2 || cfg.AutoLogin || !cfg.MetricsPublic {
		t.Errorf("migrated config %+v\n%s", cfg, doc)
	}

	d := testenv.StartDaemonArgs(t, []string{"-config", cfgPath}, "POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_SIMULATE=auto",
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

// Accounts with no old work dir and no bundle are reported: they will need
// a login; a second run leaves what is in place alone.
func TestMigrateIsRepeatable(t *testing.T) {
	o := newOldTree(t)
	data := filepath.Join(t.TempDir(), "data")
	first, _ := runMigrate(t, "-env-file", o.env, "-data-dir", data, "-link")
	if fi, err := os.Lstat(filepath.Join(data, "workers", "acct-1")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("acct-1 with -link: %v %v, want a symbolic link", fi, err)
	}
	second, report := runMigrate(t, "-env-file", o.env, "-data-dir", data, "-link")
	if !strings.Contains(report, "has credentials already") {
		t.Errorf("second run report:\n%s", report)
	}
	if second != first {
		t.Errorf("second run printed another configuration:\n%s\nwant\n%s", second, first)
	}

	// An account with neither an old work dir nor a bundle is named.
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"migrate", "-data-dir", t.TempDir(), "-work-dir", t.TempDir()}, func() []string {
		return []string{`LINGMA_ACCOUNTS=[{"name":"x","username":"x"}]`, "LINGMA_BIN=/opt/lingma"}
	}, nil, &out, &errOut)
	if err != nil || !strings.Contains(errOut.String(), "x: no credentials: it will need a login") {
		t.Errorf("migrate = %v\n%s", err, errOut.String())
	}
}
