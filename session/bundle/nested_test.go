package bundle

import (
	"errors"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/testenv"
)

// TestNestedCredentialDir: a worker that keeps its login below its config
// dir (Qoder CLI's config/.auth) packs, opens and installs it like a
// one-element dir, and an install touches only that dir: the config dir's
// other files stay. The old code refused the spec outright ("must be one
// path element").
func TestNestedCredentialDir(t *testing.T) {
	spec := Spec{Dir: "config/.auth", Required: []string{"user", "machine_id"}, MachineIDFile: "machine_id"}
	key := testKey(t)
	src := credWorkDir(t, map[string]string{"config/.auth/user": "sealed-login", "config/.auth/machine_id": "m-1\n",
		"config/settings.json": "{}", "config/.auth/sub/x": "not a credential"})
	sealed, m, err := Pack(src, spec, "alice", key, testNow)
	if err != nil {
		t.Fatalf("Pack() = %v", err)
	}
	if m.Dir != "config/.auth" || m.MachineID != "m-1" || len(m.Files) != 2 {
		t.Errorf("manifest = %+v", m)
	}
	b, err := Open(sealed, key, spec, Limits{})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	dst := credWorkDir(t, map[string]string{"config/settings.json": `{"kept":true}`, "config/.auth/machine_id": "m-2"})
	if err := b.Install(dst); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	want := credWorkDir(t, map[string]string{"config/.auth/user": "sealed-login", "config/.auth/machine_id": "m-1\n",
		"config/settings.json": `{"kept":true}`})
	if got, want := testenv.TreeHash(t, dst), testenv.TreeHash(t, want); got != want {
		t.Errorf("installed tree:\n%s\nwant:\n%s", got, want)
	}
	// A bundle of another layout does not open under this one.
	if _, err := Open(sealed, key, simSpec(), Limits{}); !errors.Is(err, ErrMalformed) {
		t.Errorf("Open(other spec) = %v, want ErrMalformed", err)
	}
}

func TestSpecDirMustStayInside(t *testing.T) {
	for _, dir := range []string{"", ".", "..", "../x", "a/../b", "/abs", "a//b", "a/./b", "a/", `a\b`, "a/b/c/d/e"} {
		spec := Spec{Dir: dir, Required: []string{"user"}}
		if err := spec.validate(); err == nil || !strings.Contains(err.Error(), "credential dir") {
			t.Errorf("validate(%q) = %v, want a refusal", dir, err)
		}
	}
	for _, dir := range []string{"cache", "config/.auth", "a/b/c/d"} {
		if err := (Spec{Dir: dir}).validate(); err != nil {
			t.Errorf("validate(%q) = %v", dir, err)
		}
	}
}
