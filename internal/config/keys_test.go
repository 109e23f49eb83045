package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNamedKeys(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "bob.key")
	if err := os.WriteFile(keyFile, []byte("sk-bob\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yml := filepath.Join(dir, "c.yaml")
	body := `api_keys:
  - sk-plain
  - name: alice
    key: sk-alice
    rpm: 60
    concurrency: 2
    tokens_per_day: 100000
  - name: bob
    key_file: ` + keyFile + `
  - name: carol
    key_env: CAROL_KEY
`
	if err := os.WriteFile(yml, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Load(yml, []string{"CAROL_KEY=sk-carol", sim})
	if err != nil {
		t.Fatal(err)
	}
	want := APIKeys{{Name: "key-1", Key: "sk-plain"}, {Name: "alice", Key: "sk-alice", RPM: 60, Concurrency: 2, TokensPerDay: 100000},
		{Name: "bob", Key: "sk-bob", KeyFile: keyFile}, {Name: "carol", Key: "sk-carol", KeyEnv: "CAROL_KEY"}}
	if len(cfg.APIKeys) != len(want) {
		t.Fatalf("keys %+v", cfg.APIKeys)
	}
	for i := range want {
		if cfg.APIKeys[i] != want[i] {
			t.Errorf("key %d = %+v, want %+v", i, cfg.APIKeys[i], want[i])
		}
	}

	// The environment: bare keys, or the same list as JSON.
	cfg, _, err = Load("", []string{"POOLGATE_API_KEYS=sk-a, sk-b", sim})
	if err != nil || len(cfg.APIKeys) != 2 || cfg.APIKeys[1] != (APIKey{Name: "key-2", Key: "sk-b"}) {
		t.Errorf("bare env keys %+v %v", cfg.APIKeys, err)
	}
	cfg, _, err = Load("", []string{`POOLGATE_API_KEYS=["sk-a",{"name":"ci","key":"sk-ci","rpm":10}]`, sim})
	if err != nil || len(cfg.APIKeys) != 2 || cfg.APIKeys[1] != (APIKey{Name: "ci", Key: "sk-ci", RPM: 10}) {
		t.Errorf("JSON env keys %+v %v", cfg.APIKeys, err)
	}
}

func TestNamedKeysRefused(t *testing.T) {
	tests := []struct{ give, want string }{
		{`[{"name":"a","key":"x"},{"name":"a","key":"y"}]`, `"a" is used twice`},
		{`[{"name":"a","key":"x"},{"name":"b","key":"x"}]`, "are the same key"},
		{`[{"name":"has space","key":"x"}]`, "api key name"},
		{`[{"name":"a"}]`, "has no key"},
		{`[{"name":"a","key":"x","rpm":-1}]`, "limits must be >= 0"},
		{`[{"name":"a","key":"x","burst":3}]`, "unknown field"},
		{`[{"name":"a","key_env":"NOPE"}]`, "key_env NOPE is empty"},
		{`[1]`, "api_keys item"},
		{`[{"name":"a","key":"x","role":"root"}]`, `role "root": use user, viewer or admin`},
	}
	for _, tt := range tests {
		_, _, err := Load("", []string{"POOLGATE_API_KEYS=" + tt.give})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.give, err, tt.want)
		}
	}
	dir := t.TempDir()
	yml := filepath.Join(dir, "c.yaml")
	_ = os.WriteFile(yml, []byte("api_keys:\n  - name: a\n    key: x\n    burst: 2\n"), 0o600)
	if _, _, err := Load(yml, nil); err == nil || !strings.Contains(err.Error(), "burst") {
		t.Errorf("unknown YAML field in a key: %v", err)
	}
}

// A typo in a named key's JSON is reported by the item's place: the error
// never carries the item, which holds the secret.
func TestKeyErrorsHoldNoSecret(t *testing.T) {
	for _, give := range []string{
		`[{"name":"a","key":"sk-very-secret","rpn":3}]`,
		`[{"name":"a","key":"sk-very-secret","rpm":"3"}]`,
		`[{"name":"a","key":"sk-very-secret"},{"name":"b","key":"sk-very-secret"}]`,
	} {
		_, _, err := Load("", []string{"POOLGATE_API_KEYS=" + give})
		if err == nil || strings.Contains(err.Error(), "sk-very-secret") {
			t.Errorf("%s: %v, want an error without the key", give, err)
		}
	}
	cfg, _, err := Load("", []string{`POOLGATE_API_KEYS=[{"name":"a","key":"x","role":"admin"},{"name":"b","key":"y","role":"viewer"},{"name":"c","key":"z"}]`, sim})
	if err != nil || !cfg.APIKeys.AdminKeys() || cfg.APIKeys[1].Role != "viewer" || cfg.APIKeys[2].Role != "" {
		t.Errorf("roles: %v %+v", err, cfg.APIKeys)
	}
}
