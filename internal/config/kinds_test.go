package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// An account names its own kind, binary, driver arguments and models; a
// pool is simulated whole or not at all, and the unknown model names that
// take the default model in a mixed pool are shell patterns.
func TestAccountsOfSeveralKinds(t *testing.T) {
	file := `driver: lingma
worker_bin: /bin/true
worker_args: [--top]
default_model_names: [claude-*]
accounts:
  - {name: lm-1}
  - {name: lm-2, worker_args: [--own]}
  - {name: ms-1, driver: openai, worker_bin: /bin/false, worker_args: [--port, "{port}"], models: [m-a, m-b]}
  - {name: ms-2, driver: openai}
`
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Load(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		account  int
		wantBin  string
		wantArgs []string
	}{
		{0, "/bin/true", []string{"--top"}},
		{1, "/bin/true", []string{"--own"}},
		{2, "/bin/false", []string{"--port", "{port}"}},
		{3, "/bin/true", nil}, // another kind: the top-level driver's arguments are not its
	}
	for _, tt := range tests {
		a := cfg.Accounts[tt.account]
		if got := cfg.BinOf(a); got != tt.wantBin {
			t.Errorf("%s: binary %q, want %q", a.Name, got, tt.wantBin)
		}
		if got := cfg.ArgsOf(a); !slices.Equal(got, tt.wantArgs) {
			t.Errorf("%s: arguments %q, want %q", a.Name, got, tt.wantArgs)
		}
	}
	if a := cfg.Accounts[2]; a.Driver != "openai" || !slices.Equal(a.Models, []string{"m-a", "m-b"}) {
		t.Errorf("ms-1: driver %q, models %v", a.Driver, a.Models)
	}
	if cfg.Simulated() {
		t.Error("a pool with worker binaries reads as simulated")
	}
}

func TestAccountsOfSeveralKindsRefused(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want string
	}{
		{"simulated with an account's own binary", []string{"POOLGATE_SIMULATE=true",
			`POOLGATE_ACCOUNTS=[{"name":"a"},{"name":"b","worker_bin":"/bin/true"}]`}, "accounts b set a worker_bin of their own"},
		{"an account without a binary beside one with", []string{
			`POOLGATE_ACCOUNTS=[{"name":"a"},{"name":"b","worker_bin":"/bin/true"}]`}, "account a has no worker binary"},
		{"an empty model", []string{"POOLGATE_SIMULATE=true", `POOLGATE_ACCOUNTS=[{"name":"a","models":[""]}]`}, "models lists an empty name"},
		{"a bad pattern", []string{"POOLGATE_DEFAULT_MODEL_NAMES=claude-[", "POOLGATE_SIMULATE=true"}, "default_model_names"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Load("", tt.env); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// Accounts with their own binaries and none at the top make a real pool:
// the simulator's auto mode does not refuse them.
func TestAccountBinariesMakeARealPool(t *testing.T) {
	cfg, _, err := Load("", []string{`POOLGATE_ACCOUNTS=[{"name":"a","worker_bin":"/bin/true"},{"name":"b","driver":"openai","worker_bin":"/bin/false"}]`})
	if err != nil || cfg.Simulated() {
		t.Errorf("Load = %v, simulated %v; want a real pool", err, cfg.Simulated())
	}
}
