package login

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
)

// snippetLen caps the page text kept in a status, in runes.
const snippetLen = 500

// redactor removes secrets (the password, as typed and URL-escaped) from
// anything a login stores or logs.
type redactor struct {
	secrets []string
}

const redacted = "[redacted]"

func newRedactor(secrets ...string) redactor {
	var r redactor
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for _, v := range []string{s, url.QueryEscape(s), url.PathEscape(s)} {
			if !slices.Contains(r.secrets, v) {
				r.secrets = append(r.secrets, v)
			}
		}
	}
	// Longest first, so that an escaped form is not half-replaced by a
	// shorter one it contains.
	slices.SortFunc(r.secrets, func(a, b string) int { return len(b) - len(a) })
	return r
}

func (r redactor) redact(s string) string {
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, redacted)
	}
	return s
}

// snippet is page text for a status: whitespace collapsed, redacted, cut.
func (r redactor) snippet(text string) string {
	s := r.redact(strings.Join(strings.Fields(text), " "))
	if rs := []rune(s); len(rs) > snippetLen {
		s = string(rs[:snippetLen]) + "…"
	}
	return s
}

// shotDir is where an instance's failure screenshots go.
func shotDir(workDir string) string { return filepath.Join(workDir, screenshotDirName) }

// keepScreenshot saves a failed attempt's screenshot as
// <WorkDir>/login-screenshots/<UTC time>.png (the name carries nothing about
// the account) and removes all but the newest Config.Screenshots. Failing to
// save only costs the picture, so it is logged, not returned.
func (r *Runner) keepScreenshot(t supervisor.LoginTarget, png []byte, log *slog.Logger) {
	if len(png) == 0 || t.WorkDir == "" || r.cfg.Screenshots < 0 {
		return
	}
	dir := shotDir(t.WorkDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("keep login screenshot", "err", err)
		return
	}
	file := filepath.Join(dir, time.Now().UTC().Format("20060102T150405.000000000Z")+".png")
	if err := os.WriteFile(file, png, 0o600); err != nil {
		log.Warn("keep login screenshot", "err", err)
		return
	}
	r.update(t.Instance, func(in *instance) { in.lastShot = file })
	shots, err := listShots(dir)
	if err != nil {
		log.Warn("prune login screenshots", "err", err)
		return
	}
	for len(shots) > r.cfg.Screenshots {
		if err := os.Remove(shots[0]); err != nil {
			log.Warn("prune login screenshots", "err", err)
			return
		}
		shots = shots[1:]
	}
}

// listShots returns the screenshots in dir, oldest first (the names sort by
// time).
func listShots(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".png") {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	slices.Sort(out)
	return out, nil
}

// Screenshot returns the instance's newest failure screenshot (PNG), also
// one kept from an earlier run in its work dir; ErrNoScreenshot when there
// is none.
func (r *Runner) Screenshot(instance string) ([]byte, error) {
	r.mu.Lock()
	in := r.insts[instance]
	var last, workDir string
	if in != nil {
		last, workDir = in.lastShot, in.workDir
	}
	r.mu.Unlock()
	if last == "" && workDir != "" {
		if shots, err := listShots(shotDir(workDir)); err == nil && len(shots) > 0 {
			last = shots[len(shots)-1]
		}
	}
	if last == "" {
		return nil, ErrNoScreenshot
	}
	b, err := os.ReadFile(last)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrNoScreenshot
	}
	return b, err
}
