package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

func TestParseKey(t *testing.T) {
	good := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	tests := []struct {
		name    string
		give    string
		wantErr string
	}{
		{name: "valid", give: good},
		{name: "surrounding space", give: " " + good + "\n"},
		{name: "empty", give: "", wantErr: "empty"},
		{name: "not base64", give: "not base64!", wantErr: "not standard base64"},
		{name: "url encoding", give: strings.NewReplacer("+", "-", "/", "_").Replace(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32))), wantErr: "not standard base64"},
		{name: "16 bytes", give: base64.StdEncoding.EncodeToString(make([]byte, 16)), wantErr: "16 bytes, want 32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ParseKey(tt.give)
			if tt.wantErr == "" {
				if err != nil || len(key) != 32 {
					t.Fatalf("ParseKey() = %d bytes, %v; want 32 bytes, nil", len(key), err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "openssl rand -base64 32") {
				t.Errorf("ParseKey() error = %v, want one containing %q and how to make a key", err, tt.wantErr)
			}
		})
	}
}

func TestHasCredentials(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
		want bool
	}{
		{name: "both", give: simCreds("u"), want: true},
		{name: "id only", give: map[string]string{"cache/id": "m"}, want: false},
		{name: "user only", give: map[string]string{"cache/user": "{}"}, want: false},
		{name: "empty user", give: map[string]string{"cache/id": "m", "cache/user": ""}, want: false},
		{name: "nothing", give: nil, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HasCredentials(credWorkDir(t, tt.give), simSpec()); got != tt.want {
				t.Errorf("HasCredentials() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBundleRoundTrip(t *testing.T) {
	key := testKey(t)
	creds := simCreds("alice")
	creds["cache/extra"] = "more state"
	creds["cache/sub/ignored"] = "subdirectories are not credentials"
	src := credWorkDir(t, creds)
	sealed, m, err := Pack(src, simSpec(), "alice", key, testNow)
	if err != nil {
		t.Fatalf("Pack() = %v", err)
	}
	if bytes.Contains(sealed, []byte("machine-alice")) || bytes.Contains(sealed, []byte("manifest")) {
		t.Fatal("sealed bundle shows plaintext")
	}
	wantExp := time.Date(2026, 4, 30, 12, 0, 0, 0, time.UTC)
	if m.Account != "alice" || m.MachineID != "machine-alice" || !m.CreatedAt.Equal(testNow) ||
		m.ExpiresAt == nil || !m.ExpiresAt.Equal(wantExp) || !slices.Equal(m.names(), []string{"extra", "id", "user"}) {
		t.Errorf("manifest = %+v", m)
	}

	b, err := Open(sealed, key, simSpec(), Limits{})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	if b.Manifest.PayloadSHA256 != m.PayloadSHA256 || b.Manifest.MachineID != "machine-alice" {
		t.Errorf("opened manifest = %+v, want %+v", b.Manifest, m)
	}
	dst := credWorkDir(t, map[string]string{"cache/stale": "old", "cache/id": "other-machine", "keep.txt": "not credentials"})
	if err := b.Install(dst); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	delete(creds, "cache/sub/ignored")
	creds["keep.txt"] = "not credentials"
	if got, want := testenv.TreeHash(t, dst), testenv.TreeHash(t, credWorkDir(t, creds)); got != want {
		t.Errorf("installed tree:\n%s\nwant:\n%s", got, want)
	}
	if !HasCredentials(dst, simSpec()) {
		t.Error("HasCredentials() = false after Install")
	}
	// Installing into a work dir that does not exist yet creates it.
	fresh := filepath.Join(t.TempDir(), "new", "work")
	if err := b.Install(fresh); err != nil || !HasCredentials(fresh, simSpec()) {
		t.Errorf("Install(new dir) = %v, credentials %v", err, HasCredentials(fresh, simSpec()))
	}
}

func TestPackWithoutCredentials(t *testing.T) {
	dir := credWorkDir(t, map[string]string{"cache/id": "machine"})
	if _, _, err := Pack(dir, simSpec(), "a", testKey(t), testNow); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("Pack() error = %v, want ErrNoCredentials", err)
	}
}

func TestOpenRejectsEveryFlippedByte(t *testing.T) {
	key := testKey(t)
	sealed, _, err := Pack(credWorkDir(t, simCreds("a")), simSpec(), "a", key, testNow)
	if err != nil {
		t.Fatal(err)
	}
	dst := credWorkDir(t, simCreds("old"))
	before := testenv.TreeHash(t, dst)
	for i := range sealed {
		bad := slices.Clone(sealed)
		bad[i] ^= 0x01
		if _, err := openAndInstall(bad, key, dst); !errors.Is(err, ErrSeal) {
			t.Fatalf("byte %d flipped: error = %v, want ErrSeal", i, err)
		}
	}
	if _, err := openAndInstall(sealed[:len(sealed)-1], key, dst); !errors.Is(err, ErrSeal) {
		t.Errorf("truncated: error = %v, want ErrSeal", err)
	}
	if _, err := openAndInstall(sealed, testKey(t), dst); !errors.Is(err, ErrSeal) {
		t.Errorf("wrong key: error = %v, want ErrSeal", err)
	}
	if got := testenv.TreeHash(t, dst); got != before {
		t.Errorf("work dir changed by rejected bundles:\n%s\nwant:\n%s", got, before)
	}
}

// openAndInstall is an import: open, and install only what opened.
func openAndInstall(sealed, key []byte, workDir string) (*Bundle, error) {
	b, err := Open(sealed, key, simSpec(), Limits{})
	if err != nil {
		return nil, err
	}
	return b, b.Install(workDir)
}

func TestOpenRejectsBadContent(t *testing.T) {
	key := testKey(t)
	ok := validEntries(t)
	with := func(extra ...entry) []entry { return append(slices.Clone(ok), extra...) }
	special := func(name string, typ byte) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: "/etc/passwd", Mode: 0o600}}
	}
	tooMany := slices.Clone(ok)
	for i := range 64 {
		tooMany = append(tooMany, reg(fmt.Sprintf("cache/f%02d", i), "x"))
	}
	noUser := map[string]string{"id": "m"}
	badSum := map[string]string{"id": "m", "user": "u"}
	bigFile := strings.Repeat("\x00", 4<<20+1)
	tests := []struct {
		name    string
		give    []byte // payload, sealed with the right key
		want    error
		wantMsg string
	}{
		{name: "dot dot", give: tarGz(t, with(reg("../x", "x"))), want: ErrMalformed, wantMsg: "disallowed path"},
		{name: "absolute", give: tarGz(t, with(reg("/etc/x", "x"))), want: ErrMalformed, wantMsg: "disallowed path"},
		{name: "escape via dir", give: tarGz(t, with(reg("cache/../../x", "x"))), want: ErrMalformed, wantMsg: "disallowed path"},
		{name: "outside cache", give: tarGz(t, with(reg("other/x", "x"))), want: ErrMalformed, wantMsg: "disallowed path"},
		{name: "nested", give: tarGz(t, with(reg("cache/sub/x", "x"))), want: ErrMalformed, wantMsg: "disallowed path"},
		{name: "symlink", give: tarGz(t, with(special("cache/link", tar.TypeSymlink))), want: ErrMalformed, wantMsg: "regular files only"},
		{name: "hardlink", give: tarGz(t, with(special("cache/hard", tar.TypeLink))), want: ErrMalformed, wantMsg: "regular files only"},
		{name: "char device", give: tarGz(t, with(special("cache/dev", tar.TypeChar))), want: ErrMalformed, wantMsg: "regular files only"},
		{name: "block device", give: tarGz(t, with(special("cache/blk", tar.TypeBlock))), want: ErrMalformed, wantMsg: "regular files only"},
		{name: "fifo", give: tarGz(t, with(special("cache/fifo", tar.TypeFifo))), want: ErrMalformed, wantMsg: "regular files only"},
		{name: "other dir", give: tarGz(t, with(entry{hdr: tar.Header{Name: "cache/sub/", Typeflag: tar.TypeDir, Mode: 0o700}})), want: ErrMalformed, wantMsg: "disallowed directory"},
		{name: "duplicate", give: tarGz(t, with(reg("cache/id", "again"))), want: ErrMalformed, wantMsg: "duplicate"},
		{name: "zip bomb", give: tarGz(t, with(reg("cache/big", bigFile))), want: ErrMalformed, wantMsg: "limit"},
		{name: "too many files", give: tarGz(t, tooMany), want: ErrMalformed, wantMsg: "more than 64 files"},
		{name: "missing manifest", give: tarGz(t, ok[1:]), want: ErrMalformed, wantMsg: "first entry must be"},
		{name: "manifest not first", give: tarGz(t, []entry{ok[1], ok[0], ok[2]}), want: ErrMalformed, wantMsg: "first entry must be"},
		{name: "empty tar", give: tarGz(t, nil), want: ErrMalformed, wantMsg: "empty archive"},
		{name: "bad manifest json", give: tarGz(t, []entry{reg(manifestName, "{"), ok[1], ok[2]}), want: ErrMalformed, wantMsg: "manifest.json"},
		{name: "unknown manifest field", give: tarGz(t, []entry{reg(manifestName, `{"version":1,"evil":true}`), ok[1], ok[2]}), want: ErrMalformed, wantMsg: "unknown field"},
		{name: "missing required file", give: tarGz(t, []entry{manifestFor(t, []string{"id"}, noUser), reg("cache/id", "m")}), want: ErrMalformed, wantMsg: "required file cache/user is missing"},
		{name: "unlisted file", give: tarGz(t, with(reg("cache/extra", "x"))), want: ErrMalformed, wantMsg: "lists 2 files"},
		{name: "file checksum", give: tarGz(t, []entry{manifestFor(t, []string{"id", "user"}, badSum), reg("cache/id", "m"), reg("cache/user", "U")}), want: ErrChecksum, wantMsg: "cache/user"},
		{name: "not gzip", give: []byte("plain text"), want: ErrMalformed, wantMsg: "not gzip"},
		{name: "not tar", give: gzipOf(t, "this is not a tar archive at all, just text"), want: ErrMalformed, wantMsg: "bad tar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := credWorkDir(t, simCreds("old"))
			before := testenv.TreeHash(t, dst)
			_, err := openAndInstall(mustSeal(t, key, tt.give), key, dst)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %v, want %v containing %q", err, tt.want, tt.wantMsg)
			}
			if got := testenv.TreeHash(t, dst); got != before {
				t.Errorf("work dir changed:\n%s\nwant:\n%s", got, before)
			}
		})
	}
}

func gzipOf(t testing.TB, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, _ = zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestOpenRejectsPayloadChecksum(t *testing.T) {
	key := testKey(t)
	files := map[string]string{"id": "m", "user": "u"}
	man := manifestFor(t, []string{"id", "user"}, files)
	man = reg(manifestName, strings.Replace(man.data, `"payload_sha256":"`, `"payload_sha256":"00`, 1))
	_, err := Open(mustSeal(t, key, tarGz(t, []entry{man, reg("cache/id", "m"), reg("cache/user", "u")})), key, simSpec(), Limits{})
	if !errors.Is(err, ErrChecksum) {
		t.Errorf("error = %v, want ErrChecksum", err)
	}
}

func TestOpenRejectsOversizedSealed(t *testing.T) {
	key := testKey(t)
	big := make([]byte, 1<<20+1)
	_, _ = rand.Read(big)
	if _, err := Open(big, key, simSpec(), Limits{}); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "over the 1048576-byte limit") {
		t.Errorf("error = %v, want ErrMalformed over the limit", err)
	}
	small := mustSeal(t, key, tarGz(t, validEntries(t)))
	if _, err := Open(small, key, simSpec(), Limits{MaxSealed: 10}); !errors.Is(err, ErrMalformed) {
		t.Errorf("MaxSealed 10: error = %v, want ErrMalformed", err)
	}
	if _, err := Open(small, key, simSpec(), Limits{MaxUnpacked: 5}); !errors.Is(err, ErrMalformed) {
		t.Errorf("MaxUnpacked 5: error = %v, want ErrMalformed", err)
	}
}

func TestInstallFailureKeepsOldCredentials(t *testing.T) {
	key := testKey(t)
	sealed, _, err := Pack(credWorkDir(t, simCreds("new")), simSpec(), "a", key, testNow)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(sealed, key, simSpec(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("disk on fire")
	failWriteAt := func(n int) installOps {
		ops, calls := osInstallOps(), 0
		ops.writeFile = func(p string, d []byte) error {
			if calls++; calls == n {
				return boom
			}
			return writeSynced(p, d)
		}
		return ops
	}
	failRenameAt := func(n int) installOps {
		ops, calls := osInstallOps(), 0
		ops.rename = func(from, to string) error {
			if calls++; calls == n {
				return boom
			}
			return os.Rename(from, to)
		}
		return ops
	}
	tests := []struct {
		name string
		give installOps
	}{
		{name: "first write", give: failWriteAt(1)},
		{name: "second write", give: failWriteAt(2)},
		{name: "move old aside", give: failRenameAt(1)},
		{name: "move new into place", give: failRenameAt(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := credWorkDir(t, simCreds("old"))
			before := testenv.TreeHash(t, dst)
			if err := b.install(dst, tt.give); !errors.Is(err, boom) {
				t.Fatalf("install() = %v, want the injected failure", err)
			}
			if got := testenv.TreeHash(t, dst); got != before {
				t.Errorf("work dir after a failed install:\n%s\nwant:\n%s", got, before)
			}
		})
	}
}

func TestInstallRepairsAnInterruptedInstall(t *testing.T) {
	key := testKey(t)
	sealed, _, err := Pack(credWorkDir(t, simCreds("new")), simSpec(), "a", key, testNow)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(sealed, key, simSpec(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// A crash after the old dir moved aside, before the new one moved in.
	want := testenv.TreeHash(t, credWorkDir(t, simCreds("old")))
	dst := credWorkDir(t, map[string]string{".cache.bundle-old/id": "machine-old\n", ".cache.bundle-new/id": "half"})
	writeFiles(t, dst, map[string]string{".cache.bundle-old/user": simCreds("old")["cache/user"]})
	ops := osInstallOps()
	ops.writeFile = func(string, []byte) error { return errors.New("still failing") }
	if err := b.install(dst, ops); err == nil {
		t.Fatal("install() = nil, want the injected failure")
	}
	if got := testenv.TreeHash(t, dst); got != want {
		t.Errorf("after repair:\n%s\nwant the old credentials back:\n%s", got, want)
	}
	if err := b.Install(dst); err != nil {
		t.Fatalf("Install() = %v", err)
	}
	if got, want := testenv.TreeHash(t, dst), testenv.TreeHash(t, credWorkDir(t, simCreds("new"))); got != want {
		t.Errorf("after Install:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseExpiry(t *testing.T) {
	at := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		give string
		want time.Time
	}{
		{name: "rfc3339", give: `{"expiresAt":"2026-05-01T00:00:00Z"}`, want: at},
		{name: "unix seconds", give: fmt.Sprintf(`{"expiresAt":%d}`, at.Unix()), want: at},
		{name: "unix millis", give: fmt.Sprintf(`{"expiresAt":%d}`, at.UnixMilli()), want: at},
		{name: "absent", give: `{"username":"u"}`},
		{name: "encrypted blob", give: "\x93\x01binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseExpiry([]byte(tt.give))
			if (got == nil) != tt.want.IsZero() || (got != nil && !got.Equal(tt.want)) {
				t.Errorf("parseExpiry(%q) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}
