package migrate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session/bundle"
)

// run is one `poolgate migrate` with args in environment env. The Python
// gateway ran Lingma workers, so the Lingma kind's credential layout is
// what its work dirs hold.
func run(t *testing.T, env []string, args ...string) (stdout, report string, err error) {
	t.Helper()
	var out, rep bytes.Buffer
	err = Run(args, env, formats, &out, &rep)
	return out.String(), rep.String(), err
}

// formats is the port's adapter as the wiring makes it
// (cmd/poolgate/internal/daemon.PlainFormat, which this package cannot
// import): the table of kinds' credential layouts, in session/bundle's
// format.
func formats(driver string) (plainbundle.Format, bool) {
	k, ok := worker.ByName(drivers.Kinds(), driver)
	if !ok || k.Credentials.Dir == "" {
		return nil, false
	}
	return format(k.Credentials), true
}

type format bundle.Spec

func (f format) OpenPlain(raw []byte, account string) (plainbundle.Bundle, error) {
	b, err := bundle.OpenPlain(raw, bundle.Spec(f), bundle.Limits{}, account, time.Now())
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (f format) HasCredentials(dir string) bool { return bundle.HasCredentials(dir, bundle.Spec(f)) }
func (f format) CredentialDir() string          { return f.Dir }

// The Python gateway without LINGMA_ACCOUNTS ran one instance on
// LINGMA_WORK_DIR: migrate makes it account lingma-0 (or -name), copies the
// dir (the old one stays, so the Python gateway can still run), turns
// python_compat on, and a second run says what the first did.
func TestOneInstanceDeployment(t *testing.T) {
	old := t.TempDir()
	testenv.LoggedInWorkDir(t, old, "solo")
	data := filepath.Join(t.TempDir(), "data")
	env := []string{"LINGMA_BIN=/opt/lingma/bin/Lingma", "LINGMA_WORK_DIR=" + old, "API_KEYS=sk-1"}
	doc, report, err := run(t, env, "-data-dir", data)
	if err != nil {
		t.Fatalf("migrate: %v\n%s", err, report)
	}
	for _, want := range []string{"it is account lingma-0 here", "lingma-0: copied " + old + " to " + filepath.Join(data, "workers", "lingma-0"),
		"python_compat: true is set", "\nbundle_key: ", "\nmetrics_token: ", "\nadmin_token: ", "# bundle_export_plain: true"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	for _, f := range []string{"cache/id", "cache/user", "logs/lingma.log"} {
		if _, err := os.Stat(filepath.Join(data, "workers", "lingma-0", f)); err != nil {
			t.Errorf("copy: %v", err)
		}
		if _, err := os.Stat(filepath.Join(old, f)); err != nil {
			t.Errorf("the old work dir lost %s: %v", f, err)
		}
	}
	cfg := loadYAML(t, doc)
	if len(cfg.Accounts) != 1 || cfg.Accounts[0].Name != "lingma-0" || !cfg.PythonCompat || cfg.DataDir != data {
		t.Errorf("config %+v\n%s", cfg, doc)
	}

	again, report, err := run(t, env, "-data-dir", data)
	if err != nil || again != doc || !strings.Contains(report, "lingma-0: already copied from "+old+" by the run of ") {
		t.Errorf("second run: %v, same config %v\n%s", err, again == doc, report)
	}

	// -name names the account as the old gateway's /healthz did.
	doc, _, err = run(t, env, "-data-dir", filepath.Join(t.TempDir(), "data"), "-name", "instance-0")
	if cfg := loadYAML(t, doc); err != nil || cfg.Accounts[0].Name != "instance-0" {
		t.Errorf("-name instance-0: %v %+v", err, cfg.Accounts)
	}
}

// -move takes the old dir away (the second run says so), -link leaves a
// link, and they exclude each other.
func TestMoveAndLink(t *testing.T) {
	tests := []struct {
		flag     string
		wantOld  bool
		wantLink bool
		want     string
	}{
		{"-move", false, false, "already moved from "},
		{"-link", true, true, "already linked from "},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			old := filepath.Join(t.TempDir(), "work")
			testenv.LoggedInWorkDir(t, filepath.Join(old, "acct-1"), "u1")
			data := t.TempDir()
			env := []string{"LINGMA_BIN=/opt/lingma", `LINGMA_ACCOUNTS=[{"name":"acct-1","username":"u1"}]`, "LINGMA_WORK_DIR=" + old}
			if _, report, err := run(t, env, "-data-dir", data, tt.flag); err != nil {
				t.Fatalf("migrate %s: %v\n%s", tt.flag, err, report)
			}
			_, err := os.Stat(filepath.Join(old, "acct-1", "cache", "user"))
			fi, lerr := os.Lstat(filepath.Join(data, "workers", "acct-1"))
			if (err == nil) != tt.wantOld || lerr != nil || (fi.Mode()&os.ModeSymlink != 0) != tt.wantLink {
				t.Errorf("old dir there: %v (want %v); target %v %v, link want %v", err == nil, tt.wantOld, fi, lerr, tt.wantLink)
			}
			if _, report, err := run(t, env, "-data-dir", data, tt.flag); err != nil || !strings.Contains(report, "acct-1: "+tt.want) {
				t.Errorf("second run: %v\n%s", err, report)
			}
		})
	}
	if _, _, err := run(t, nil, "-data-dir", t.TempDir(), "-move", "-link"); err == nil || !strings.Contains(err.Error(), "exclude each other") {
		t.Errorf("-move -link: %v", err)
	}
}

// What poolgate would not start with stops migrate before it changes
// anything: no data dir, no journal, no copy.
func TestRefusesBeforeChangingAnything(t *testing.T) {
	old := t.TempDir()
	testenv.LoggedInWorkDir(t, filepath.Join(old, "acct-1"), "u1")
	crowded := t.TempDir()
	if err := os.MkdirAll(filepath.Join(crowded, "workers", "acct-1", "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	accounts := `LINGMA_ACCOUNTS=[{"name":"acct-1","username":"u1"}]`
	tests := []struct {
		name string
		env  []string
		data string
		want string
	}{
		{"accounts but no worker binary", []string{accounts, "LINGMA_WORK_DIR=" + old}, "", "no worker_bin"},
		{"a setting poolgate refuses", []string{accounts, "LINGMA_BIN=/opt/lingma", "INSTANCE_COUNT=2", "LINGMA_WORK_DIR=" + old}, "", "INSTANCE_COUNT"},
		{"a password from an unset variable", []string{`POOLGATE_ACCOUNTS=[{"name":"acct-1","password_env":"NOT_SET"}]`, "LINGMA_BIN=/opt/lingma",
			"LINGMA_WORK_DIR=" + old}, "", "password_env NOT_SET"},
		{"a data dir inside the old work dir", []string{accounts, "LINGMA_BIN=/opt/lingma", "LINGMA_WORK_DIR=" + old},
			filepath.Join(old, "acct-1", "poolgate"), "inside the old work dir"},
		{"a target with files of its own", []string{accounts, "LINGMA_BIN=/opt/lingma", "LINGMA_WORK_DIR=" + old}, crowded,
			"holds files but no credentials"},
		{"a driver that keeps no login", []string{accounts, "LINGMA_BIN=/opt/lingma", "LINGMA_WORK_DIR=" + old, "POOLGATE_DRIVER=openai"}, "",
			`driver "openai" keeps no login`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := tt.data
			if data == "" {
				data = filepath.Join(t.TempDir(), "data")
			}
			before := testenv.TreeHash(t, old)
			_, report, err := run(t, tt.env, "-data-dir", data)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("got %v, want an error with %q saying nothing was changed\n%s", err, tt.want, report)
			}
			if _, err := os.Stat(filepath.Join(data, journalFile)); err == nil {
				t.Error("a journal was written")
			}
			if after := testenv.TreeHash(t, old); after != before {
				t.Errorf("the old work dir changed:\n%s\nwant\n%s", after, before)
			}
		})
	}
}

// loadYAML loads a written configuration as the daemon does.
func loadYAML(t *testing.T, doc string) config.Config {
	t.Helper()
	p := filepath.Join(t.TempDir(), "poolgate.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(p, nil)
	if err != nil {
		t.Fatalf("the written configuration does not load: %v\n%s", err, doc)
	}
	return cfg
}

// An account with neither an old work dir nor a bundle is named: it will
// need a login.
func TestAccountWithoutALogin(t *testing.T) {
	env := []string{`LINGMA_ACCOUNTS=[{"name":"x","username":"x"}]`, "LINGMA_BIN=/opt/lingma"}
	_, report, err := run(t, env, "-data-dir", t.TempDir(), "-work-dir", t.TempDir())
	if err != nil || !strings.Contains(report, "x: no old work dir found and no session bundle: it will need a login at its first start") {
		t.Errorf("migrate = %v\n%s", err, report)
	}
}
