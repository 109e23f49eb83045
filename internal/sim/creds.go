package sim

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// credLife is how long a login lasts (the real binary's tokens live about 60 days).
const credLife = 60 * 24 * time.Hour

// userFile is the JSON in cache/user. The real binary encrypts it; the
// simulator keeps it readable so tests can look inside.
type userFile struct {
	Username  string    `json:"username"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expiresAt"`
	Org       string    `json:"org,omitempty"`
}

// creds reads and writes the work dir's credentials. It reads the files on
// every question, so a bundle copied into the work dir, or a file deleted by
// a test, takes effect at once, as with the real binary.
type creds struct {
	dir string     // DIR/cache
	mu  sync.Mutex // serialises writers; readers see whole files (rename)
}

func newCreds(workDir string) *creds { return &creds{dir: filepath.Join(workDir, "cache")} }

func (c *creds) idPath() string   { return filepath.Join(c.dir, "id") }
func (c *creds) userPath() string { return filepath.Join(c.dir, "user") }

// ensureID returns the machine id, creating cache/id when it is missing.
func (c *creds) ensureID() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ensureIDLocked()
}

func (c *creds) ensureIDLocked() (string, error) {
	if id := c.machineID(); id != "" {
		return id, nil
	}
	id := randomHex(16)
	if err := writeAtomic(c.idPath(), []byte(id)); err != nil {
		return "", err
	}
	return id, nil
}

// machineID returns the machine id, or "" when cache/id is missing or empty.
func (c *creds) machineID() string {
	b, err := os.ReadFile(c.idPath())
	if err != nil {
		return ""
	}
	return string(trimSpaceBytes(b))
}

// user returns the logged-in user, or false when cache/user is missing,
// unreadable, incomplete or expired.
func (c *creds) user() (userFile, bool) {
	b, err := os.ReadFile(c.userPath())
	if err != nil {
		return userFile{}, false
	}
	var u userFile
	if json.Unmarshal(b, &u) != nil || u.Username == "" || u.Token == "" {
		return userFile{}, false
	}
	if !u.ExpiresAt.IsZero() && time.Now().After(u.ExpiresAt) {
		return userFile{}, false
	}
	return u, true
}

// status returns the logged-in user and the machine id; ok is false unless
// both are present.
func (c *creds) status() (u userFile, id string, ok bool) {
	u, ok = c.user()
	id = c.machineID()
	return u, id, ok && id != ""
}

// login writes credentials for username (and the machine id when missing).
func (c *creds) login(username, org string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.ensureIDLocked(); err != nil {
		return err
	}
	u := userFile{Username: username, Token: randomHex(24), ExpiresAt: time.Now().Add(credLife).UTC(), Org: org}
	b, err := json.Marshal(u)
	if err != nil {
		return fmt.Errorf("encode cache/user: %w", err)
	}
	return writeAtomic(c.userPath(), b)
}

// logout deletes cache/id and cache/user.
func (c *creds) logout() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, p := range []string{c.userPath(), c.idPath()} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeAtomic writes data to path through a temp file and a rename, so a
// reader (or a bundle export) never sees half a file.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}

func trimSpaceBytes(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
