package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testNow is the clock of packed test bundles.
var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func testKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// writeFiles creates files (slash paths relative to dir) with mode 0600.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// simSpec is the credential layout of the bundled simulator's work dir
// (as a driver registers one): cache/id, the machine id the
// login is bound to, and cache/user, the login with its expiry.
func simSpec() Spec {
	return Spec{Dir: "cache", Required: []string{"id", "user"}, MachineIDFile: "id", ExpiryFile: "user"}
}

// simCreds is a logged-in work dir as the simulator writes it.
func simCreds(user string) map[string]string {
	return map[string]string{
		"cache/id":   "machine-" + user + "\n",
		"cache/user": `{"username":"` + user + `","token":"tok","expiresAt":"2026-04-30T12:00:00Z"}`,
	}
}

// credWorkDir returns a fresh work dir holding files.
func credWorkDir(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	return dir
}

// entry is one tar entry of a hand-built bundle.
type entry struct {
	hdr  tar.Header
	data string
}

func reg(name, data string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data))}, data: data}
}

// manifestFor returns a manifest entry consistent with the given files (name
// in the credential dir -> content), in the given order.
func manifestFor(t testing.TB, names []string, files map[string]string) entry {
	t.Helper()
	m := Manifest{Version: 1, Account: "acct", Dir: "cache", CreatedAt: testNow}
	var cf []credFile
	for _, n := range names {
		sum := sha256.Sum256([]byte(files[n]))
		m.Files = append(m.Files, ManifestFile{Name: n, Size: int64(len(files[n])), SHA256: hex.EncodeToString(sum[:])})
		cf = append(cf, credFile{name: n, data: []byte(files[n])})
	}
	m.PayloadSHA256 = payloadDigest(cf)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return reg(manifestName, string(b))
}

// validEntries is a consistent bundle's entries (simSpec's layout).
func validEntries(t testing.TB) []entry {
	files := map[string]string{"id": "machine-1", "user": `{"username":"u"}`}
	return []entry{manifestFor(t, []string{"id", "user"}, files), reg("cache/id", files["id"]), reg("cache/user", files["user"])}
}

// tarGz packs entries as written, headers and all.
func tarGz(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := e.hdr
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar header %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatalf("tar data %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func mustSeal(t testing.TB, key, payload []byte) []byte {
	t.Helper()
	s, err := Seal(key, payload)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
