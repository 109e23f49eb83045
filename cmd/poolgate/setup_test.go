package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/config"
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
		{"a real worker", "/opt/lingma/bin/lingma", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Config{Driver: "lingma", WorkerBin: tt.workerBin, Accounts: accounts, DataDir: t.TempDir()}
			_, workers, err := workerSetup(cfg, log)
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
