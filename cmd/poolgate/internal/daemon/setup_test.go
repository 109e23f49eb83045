package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/pool/worker"
)

// The bundled simulator learns whom to let log in from SIMWORKER_ACCOUNTS;
// a real worker binary never gets that variable (it would hold every
// account's password in its environment), only its account's own.
func TestSimulatorCredentialsReachOnlyTheSimulator(t *testing.T) {
	accounts := []config.Account{{Name: "a1", Username: "alice", Password: "pw-one", Env: map[string]string{"MINE": "a1"}}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		name      string
		workerBin string
		wantSim   bool
	}{
		{"the bundled simulator", "", true},
		{"a real worker", executable(t), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.WorkerBin, cfg.Accounts, cfg.DataDir = tt.workerBin, accounts, t.TempDir()
			_, workers, err := workerSetup(cfg, newWorkerDrivers(cfg, log), log)
			if err != nil || len(workers) != 1 {
				t.Fatalf("workerSetup() = %d workers, %v", len(workers), err)
			}
			env := workers[0].Account.Env
			sim := slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SIMWORKER_") })
			if sim != tt.wantSim {
				t.Errorf("env %q: simulator credentials present = %v, want %v", env, sim, tt.wantSim)
			}
			if !slices.Contains(env, "MINE=a1") {
				t.Errorf("env %q lacks the account's own MINE=a1", env)
			}
		})
	}
}

// executable is a file this user may run, standing in for a worker binary.
func executable(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "worker")
	if err := os.WriteFile(path, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A worker_bin that is missing, not executable or not a file refuses the
// start, naming the setting and why: it would otherwise have every worker
// restarted forever while the daemon looked alive (issue 35).
func TestWorkerBinMustRun(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name string
		give string
		want string // "" = starts
	}{
		{"missing", filepath.Join(dir, "nowhere", "worker"), "no such file"},
		{"not executable", plain, "permission denied"},
		{"a directory", dir, "worker_bin"},
		{"not on PATH", "no-such-worker-binary", "not found"},
		{"executable", executable(t), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.WorkerBin, cfg.Accounts, cfg.DataDir = tt.give, []config.Account{{Name: "a1"}}, t.TempDir()
			_, _, err := workerSetup(cfg, newWorkerDrivers(cfg, log), log)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("workerSetup = %v, want a start", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "POOLGATE_WORKER_BIN")):
				t.Errorf("workerSetup = %v, want an error saying %q and naming POOLGATE_WORKER_BIN", err, tt.want)
			}
		})
	}
}

// An account that was named after its username before names defaulted to
// account-N keeps its work dir (and its login): the dir moves with it, and
// only when nothing else claims either name.
func TestUnnamedAccountKeepsItsWorkDir(t *testing.T) {
	data := t.TempDir()
	for _, dir := range []string{"dev1@example.com", "taken@example.com", "account-3"} {
		if err := os.MkdirAll(filepath.Join(data, "workers", dir, "cache"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	cfg := config.Config{DataDir: data, Accounts: []config.Account{
		{Name: "account-1", Username: "dev1@example.com", Unnamed: true},
		{Name: "taken@example.com", Username: "someone"},
		{Name: "account-3", Username: "taken@example.com", Unnamed: true},
	}}
	adoptWorkDirs(cfg, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(filepath.Join(data, "workers", "account-1", "cache")); err != nil {
		t.Errorf("account-1 did not get its old work dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(data, "workers", "taken@example.com")); err != nil {
		t.Errorf("the dir of an account named taken@example.com was moved: %v", err)
	}
}

// The driver setting picks a kind from the daemon's table; a name that is
// none refuses the start, naming the kinds there are.
func TestUnknownDriverRefusesTheStart(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		driver, want string
	}{
		{"bogus", `driver "bogus": use lingma, openai, claude-code or qoder`},
		{"", `driver "": use lingma, openai, claude-code or qoder`},
		{"openai", ""},
		{"lingma", ""},
		{"claude-code", ""},
		{"qoder", ""},
	} {
		t.Run(tt.driver, func(t *testing.T) {
			cfg := config.Defaults()
			cfg.Driver, cfg.DataDir = tt.driver, t.TempDir()
			kind, workers, err := workerSetup(cfg, newWorkerDrivers(cfg, log), log)
			var driver worker.Driver
			if len(workers) > 0 {
				driver = workers[0].Driver
			}
			switch {
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Errorf("workerSetup = %v, want %q", err, tt.want)
			case tt.want == "" && (err != nil || driver == nil || kind.Name != tt.driver):
				t.Errorf("workerSetup = kind %q, driver %v, %v; want the %s kind's driver", kind.Name, driver, err, tt.driver)
			}
		})
	}
}
