package testenv

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// LoggedInWorkDir lays out a logged-in work dir at dir, as the
// simulator and the real worker leave it: cache/id and cache/user (for
// username, valid for a day), and a log beside them.
func LoggedInWorkDir(t testing.TB, dir, username string) {
	t.Helper()
	user, _ := json.Marshal(map[string]any{"username": username, "token": "tok-" + username,
		"expiresAt": time.Now().Add(24 * time.Hour).Format(time.RFC3339)})
	for name, data := range map[string][]byte{"cache/id": []byte("machine-" + username), "cache/user": user,
		"logs/lingma.log": []byte("old log\n")} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// PackWorkDir is the Python gateway's export of a work dir: base64 of a
// tar.gz of the whole dir, paths relative to it ("./cache/id").
func PackWorkDir(t testing.TB, dir string) string {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = "./" + filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}
