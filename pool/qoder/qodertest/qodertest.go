// Package qodertest runs the real Qoder CLI in tests: the pinned qodercli
// that `make agents` installs, an environment that keeps it on this
// machine (a fresh home, loopback only), and a stored login made the way
// the CLI makes one, so that a test can see a logged-in CLI without the
// vendor's servers. Only tests import it.
package qodertest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/agents"
)

// Version is the pinned release (internal/agents/npm/package.json).
const Version = "1.1.52"

// Bin returns the installed qodercli, or fails the test saying how to
// install it.
func Bin(t testing.TB) string {
	t.Helper()
	p := filepath.Join(agents.Dir(), "node_modules", ".bin", "qodercli")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("qodercli %s is not installed in %s: run `make agents` (needs Node.js 20+ with npm; see docs/development.md)",
			Version, agents.Dir())
	}
	return p
}

// bundle is the CLI's JavaScript bundle, which embeds its auth module.
func bundle(t testing.TB) string {
	t.Helper()
	Bin(t)
	return filepath.Join(agents.Dir(), "node_modules", "@qoder-ai", "qodercli", "bundle", "qodercli.js")
}

// RefusedProxy is a loopback port nothing listens on: the CLI's requests
// to the vendor fail at once rather than after a DNS timeout. (Its device
// login then fails before printing its URL: see RefusingProxy.)
const RefusedProxy = "http://127.0.0.1:9"

// RefusingProxy starts an HTTP proxy on loopback that answers every
// request, CONNECT included, with 502, for as long as the test runs: the
// CLI reaches nothing beyond loopback, yet takes the failures for the
// network's (its device login prints its URL and keeps polling, as
// offline, where a refused connection to the proxy makes it give up).
func RefusingProxy(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Env is an environment for running the CLI directly: PATH (for node), a
// home and temp dir under dir, the config dir configDir.
func Env(dir, configDir string) []string {
	return []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "HOME=" + filepath.Join(dir, "home"),
		"TMPDIR=" + os.TempDir(), "QODER_CONFIG_DIR=" + configDir, "QODER_DISABLE_UMID_REPORT=1"}
}

//go:embed seal.cjs
var sealJS []byte

// StoreLogin writes a stored login for email into configDir's .auth,
// encrypted as qodercli encrypts it: with the credential_storage_encrypt
// of the auth module its bundle embeds, keyed by the first 16 characters
// of .auth/machine_id (made here when missing, a random UUID as the CLI
// makes it). The login is no account of the vendor's: the CLI takes it as
// its own (its status says logged in, it answers initialize), and a
// request to the vendor with it fails.
func StoreLogin(t testing.TB, configDir, email string) {
	t.Helper()
	auth := filepath.Join(configDir, ".auth")
	if err := os.MkdirAll(auth, 0o700); err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(auth, "machine_id")
	id, err := os.ReadFile(idFile)
	if err != nil || len(bytes.TrimSpace(id)) < 16 {
		id = []byte(newUUID(t))
		if err := os.WriteFile(idFile, id, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	user, _ := json.Marshal(map[string]any{"uid": "u-" + strings.ReplaceAll(email, "@", "-"), "name": email,
		"email": email, "login_method": "device-token", "login_timestamp": now.UnixMilli(),
		"security_oauth_token": "test-token", "refresh_token": "test-refresh",
		"expire_time": now.Add(24 * time.Hour).UnixMilli(), "refresh_token_expire_time": now.Add(240 * time.Hour).Unix()})
	script := filepath.Join(t.TempDir(), "seal.cjs")
	if err := os.WriteFile(script, sealJS, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", script, bundle(t), strings.TrimSpace(string(id)))
	cmd.Stdin = bytes.NewReader(user)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	sealed, err := cmd.Output()
	if err != nil || len(sealed) == 0 {
		t.Fatalf("seal a stored login with qodercli's auth module: %v: %s", err, stderr.String())
	}
	if err := os.WriteFile(filepath.Join(auth, "user"), sealed, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newUUID(t testing.TB) string {
	b, err := os.ReadFile("/proc/sys/kernel/random/uuid")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Status runs `qodercli status -o json` on configDir and returns what it
// printed, read as soon as it is printed (logged out, the command lingers
// for seconds after its answer).
func Status(t testing.TB, dir, configDir string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Bin(t), "status", "-o", "json")
	cmd.Env, cmd.Dir = Env(dir, configDir), dir
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var st map[string]any
	if err := json.NewDecoder(out).Decode(&st); err != nil {
		t.Fatalf("qodercli status printed no JSON: %v", err)
	}
	return st
}
