package main

import (
	"io"
	"log/slog"
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
