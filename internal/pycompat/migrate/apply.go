package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
)

// check renders the configuration as it will be written (the plain
// bundles of accounts that will have credentials left out) and loads it
// back as the daemon started with -config loads it, in the environment
// this run had less the settings now in the file. A configuration the
// daemon would refuse stops the run before anything changes.
func (m *migration) check(cfg config.Config, steps []step, env []string) ([]byte, error) {
	out := cfg
	out.Accounts = append([]config.Account(nil), cfg.Accounts...)
	for i, s := range steps {
		if s.creds {
			out.Accounts[i].SessionBundlePlain = "" // in the work dir by then
		}
	}
	doc, err := configYAML(out)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "poolgate-migrate-*.yaml")
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(doc)
	if err = errors.Join(err, f.Close()); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if _, _, err := config.Load(f.Name(), unsettled(env), pycompat.ReadSettings); err != nil {
		return nil, fmt.Errorf("migrate: the configuration it would write does not start poolgate, so nothing was changed: %w", err)
	}
	return doc, nil
}

// unsettled is env less the settings (the Python gateway's and poolgate's),
// which the written file holds: what is left is what the file may point
// at, such as an account's password_env.
func unsettled(env []string) []string {
	legacy := map[string]bool{"LINGMA_WORK_DIR": true}
	for _, l := range pycompat.Settings() {
		legacy[l.Env] = true
	}
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !legacy[k] && !strings.HasPrefix(k, "POOLGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// apply brings each account's login over, recording what it did in the
// journal as it goes.
func (m *migration) apply(steps []step) error {
	for _, s := range steps {
		name := s.acct.Name
		if s.inPlace {
			fmt.Fprintln(m.report, m.journal.already(name, s.target))
			continue
		}
		if s.src != "" {
			abs, err := bring(s.src, s.target, m.opts.mode)
			if err != nil {
				return fmt.Errorf("migrate: account %s: %w", name, err)
			}
			fmt.Fprintf(m.report, "%s: %s %s to %s\n", name, m.opts.mode, abs, s.target)
			if err := m.journal.record(m.opts.dataDir, name, string(m.opts.mode), abs); err != nil {
				return err
			}
		}
		installed, err := plainbundle.Install(s.plain, s.target, m.format)
		if err != nil {
			return fmt.Errorf("migrate: account %s: install its plain session bundle: %w", name, err)
		}
		if installed {
			fmt.Fprintf(m.report, "%s: plain session bundle installed into %s\n", name, s.target)
			if err := m.journal.record(m.opts.dataDir, name, howInstalled, ""); err != nil {
				return err
			}
		}
		switch {
		case m.format.HasCredentials(s.target):
		case s.src == "":
			fmt.Fprintf(m.report, "%s: no old work dir found and no session bundle: it will need a login at its first start\n", name)
		default:
			fmt.Fprintf(m.report, "%s: its old work dir holds no login: it will need one at its first start\n", name)
		}
	}
	return nil
}

// bring copies, moves or links the old work dir src to target, and
// returns src's absolute path. A copy is made beside target and renamed
// into place, so that a failure leaves no half copy behind.
func bring(src, target string, how mode) (string, error) {
	abs, err := filepath.Abs(src)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return "", err
	}
	// An empty dir or a stale link (checkTarget has refused anything else).
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	switch how {
	case modeLink:
		err = os.Symlink(abs, target)
	case modeMove:
		if err = os.Rename(abs, target); err != nil {
			err = fmt.Errorf("%w (on another file system, copy it: the default)", err)
		}
	default:
		err = copyInto(abs, target)
	}
	if err != nil {
		return "", fmt.Errorf("%s %s to %s: %w", strings.TrimSuffix(strings.TrimSuffix(string(how), "d"), "e"), abs, target, err)
	}
	return abs, nil
}

// copyInto copies the tree src to target through a temp dir beside it.
func copyInto(src, target string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(target), "."+filepath.Base(target)+".copy-")
	if err != nil {
		return err
	}
	if err := copyTree(src, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	st, err := os.Stat(src)
	if err == nil {
		err = os.Chmod(tmp, st.Mode().Perm())
	}
	if err == nil {
		err = os.Rename(tmp, target)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
	}
	return err
}

// copyTree copies the directories, regular files and symbolic links under
// src into dst (which exists), keeping their permissions. A socket or pipe
// (a worker's live IPC) is state of a running process, not of the account:
// it is left out.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == src {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(to, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case info.Mode().IsRegular():
			return copyFile(p, to, info.Mode().Perm())
		}
		return nil
	})
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Sync(), out.Close())
}

// write writes the configuration to -o (through a temp file, mode 0600) or
// stdout.
func (m *migration) write(doc []byte, stdout io.Writer) error {
	if m.opts.out == "" {
		_, err := stdout.Write(doc)
		return err
	}
	if old, err := os.ReadFile(m.opts.out); err == nil && bytes.Equal(old, doc) {
		fmt.Fprintf(m.report, "%s holds this configuration already: start with poolgate -config %s\n", m.opts.out, m.opts.out)
		return nil
	}
	tmp := m.opts.out + ".tmp"
	if err := os.WriteFile(tmp, doc, 0o600); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := os.Rename(tmp, m.opts.out); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(m.report, "wrote %s: start with poolgate -config %s\n", m.opts.out, m.opts.out)
	return nil
}
