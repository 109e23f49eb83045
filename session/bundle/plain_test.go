package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/testenv"
)

// plainDir is a work dir as the Python gateway tarred it: "./" paths, the
// credentials in cache/, logs and other state beside them.
func plainDir() []entry {
	return []entry{
		{hdr: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		{hdr: tar.Header{Name: "./cache/", Typeflag: tar.TypeDir, Mode: 0o700}},
		reg("./cache/id", "machine-1\n"),
		reg("./cache/user", `{"username":"u","expiresAt":"2026-04-30T12:00:00Z"}`),
		{hdr: tar.Header{Name: "./cache/sub/", Typeflag: tar.TypeDir, Mode: 0o700}},
		reg("./cache/sub/index", "not a credential"),
		reg("./logs/worker.log", "log line\n"),
		{hdr: tar.Header{Name: "./logs/latest", Typeflag: tar.TypeSymlink, Linkname: "/var/log/x"}},
	}
}

func TestOpenPlain(t *testing.T) {
	b, err := OpenPlain(tarGz(t, plainDir()), simSpec(), Limits{}, "acct-1", testNow)
	if err != nil {
		t.Fatalf("OpenPlain: %v", err)
	}
	var names []string
	for _, f := range b.Manifest.Files {
		names = append(names, f.Name)
	}
	if !slices.Equal(names, []string{"id", "user"}) || b.Manifest.Account != "acct-1" || b.Manifest.MachineID != "machine-1" ||
		b.Manifest.ExpiresAt == nil {
		t.Errorf("manifest %+v, want the two credential files of acct-1 with machine id and expiry", b.Manifest)
	}
	dst := credWorkDir(t, simCreds("old"))
	if err := b.Install(dst); err != nil {
		t.Fatal(err)
	}
	if !HasCredentials(dst, simSpec()) {
		t.Error("installed plain bundle has no credentials")
	}
	// Without the "./" prefix too.
	var bare []entry
	for _, e := range plainDir()[1:] {
		e.hdr.Name = strings.TrimPrefix(e.hdr.Name, "./")
		bare = append(bare, e)
	}
	if _, err := OpenPlain(tarGz(t, bare), simSpec(), Limits{}, "acct-1", testNow); err != nil {
		t.Errorf("OpenPlain without ./: %v", err)
	}
}

func TestOpenPlainRejects(t *testing.T) {
	with := func(extra ...entry) []entry { return append(plainDir(), extra...) }
	special := func(name string, typ byte) entry {
		return entry{hdr: tar.Header{Name: name, Typeflag: typ, Linkname: "/etc/passwd", Mode: 0o600}}
	}
	big := strings.Repeat("\x00", 4<<20+1)
	tests := []struct {
		name, wantMsg string
		give          []byte
	}{
		{"dot dot", "disallowed path", tarGz(t, with(reg("./../x", "x")))},
		{"dot dot elsewhere", "disallowed path", tarGz(t, with(reg("logs/../../x", "x")))},
		{"absolute", "disallowed path", tarGz(t, with(reg("/etc/x", "x")))},
		{"symlink credential", "regular files only", tarGz(t, with(special("./cache/evil", tar.TypeSymlink)))},
		{"hardlink credential", "regular files only", tarGz(t, with(special("cache/hard", tar.TypeLink)))},
		{"cache is a file", "must be a directory", tarGz(t, []entry{reg("cache", "x")})},
		{"duplicate", "duplicate", tarGz(t, with(reg("cache/id", "again")))},
		{"credentials too big", "limit", tarGz(t, with(reg("cache/big", big)))},
		{"bomb elsewhere", "too large", tarGz(t, with(reg("logs/huge", strings.Repeat("\x00", maxPlainUnpacked+1))))},
		{"missing user", "required file cache/user is missing", tarGz(t, []entry{reg("cache/id", "m")})},
		{"empty user", "required file cache/user is empty", tarGz(t, []entry{reg("cache/id", "m"), reg("cache/user", "")})},
		{"not gzip", "not gzip", []byte("plain text")},
		{"not tar", "bad tar", gzipOf(t, "this is not a tar archive at all, just text")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := credWorkDir(t, simCreds("old"))
			before := testenv.TreeHash(t, dst)
			b, err := OpenPlain(tt.give, simSpec(), Limits{}, "acct-1", testNow)
			if err == nil {
				err = b.Install(dst)
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error = %v, want ErrMalformed containing %q", err, tt.wantMsg)
			}
			if got := testenv.TreeHash(t, dst); got != before {
				t.Errorf("work dir changed")
			}
		})
	}
}

// FuzzOpenPlain: whatever OpenPlain accepts holds exactly the required
// credential files and plain names, and it never panics.
func FuzzOpenPlain(f *testing.F) {
	f.Add(tarGz(f, plainDir()))
	f.Add(tarGz(f, append(plainDir(), reg("./../x", "x"))))
	f.Add(gzipOf(f, "not a tar"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := OpenPlain(data, simSpec(), Limits{}, "fuzz", testNow)
		if err != nil {
			return
		}
		for _, cf := range b.files {
			if !validFileName(cf.name) {
				t.Fatalf("accepted file name %q", cf.name)
			}
		}
		if !b.Manifest.hasFile("id") || !b.Manifest.hasFile("user") {
			t.Fatalf("accepted a bundle without the required files: %+v", b.Manifest)
		}
	})
}

// PackPlain is what the Python gateway unpacks into a work dir: cache/ and
// its credential files by relative path, nothing else of the work dir, no
// manifest; OpenPlain takes it back unchanged.
func TestPackPlain(t *testing.T) {
	dir := credWorkDir(t, simCreds("u1"))
	writeFiles(t, dir, map[string]string{"logs/worker.log": "a log line\n", "cache/sub/index": "not a credential"})
	payload, err := PackPlain(dir, simSpec(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if want := []string{"cache/", "cache/id", "cache/user"}; !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
	b, err := OpenPlain(payload, simSpec(), Limits{}, "acct-1", testNow)
	if err != nil {
		t.Fatalf("OpenPlain(PackPlain()): %v", err)
	}
	dst := t.TempDir()
	if err := b.Install(dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range simCreds("u1") {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Errorf("%s after the round trip: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := PackPlain(t.TempDir(), simSpec(), testNow); !errors.Is(err, ErrNoCredentials) {
		t.Errorf("PackPlain of an empty work dir: %v, want ErrNoCredentials", err)
	}
}
