package testenv

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// update is the -update flag of every package with golden files.
var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// Golden compares got with testdata/<name>.golden; with -update it rewrites
// the file instead.
func Golden(t testing.TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// Transcript is what a golden file keeps of one handler call: the status
// line, the Content-Type, the Retry-After when there is one, a blank line and
// the body.
func Transcript(rec *httptest.ResponseRecorder) string {
	head := rec.Result().Status + "\n" + rec.Header().Get("Content-Type") + "\n"
	if ra := rec.Header().Get("Retry-After"); ra != "" {
		head += "Retry-After: " + ra + "\n"
	}
	return head + "\n" + rec.Body.String()
}

// TreeHash fingerprints every path (relative to dir), mode and content
// under dir, so a test can prove a directory was left exactly as it was.
func TreeHash(t testing.TB, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		line := fmt.Sprintf("%s %v", rel, fi.Mode())
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatalf("hash %s: %v", dir, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// ExampleConfig writes deploy/poolgate.example.yaml as it ships, its
// secret files (/run/secrets/...) made in a temp dir, and returns its path
// and the environment its key_env and password_env entries read:
// alice, bob, ci and grafana are keys sk-<name>, ops (role admin) is
// sk-ops; the accounts' passwords are pw1 and pw2.
func ExampleConfig(t testing.TB) (path string, env []string) {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "deploy", "poolgate.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := t.TempDir()
	for name, v := range map[string]string{"bob-key": "sk-bob\n", "ops-key": "sk-ops\n", "work-2-password": "pw2\n"} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path = filepath.Join(t.TempDir(), "poolgate.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(string(b), "/run/secrets", secrets)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, []string{"ALICE_KEY=sk-alice", "CI_KEY=sk-ci", "GRAFANA_KEY=sk-grafana", "WORK1_PASSWORD=pw1"}
}
