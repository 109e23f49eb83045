package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// installOps are the file system steps of Install that can fail half-way;
// tests swap them to prove that a failure leaves the old credentials.
type installOps struct {
	writeFile func(path string, data []byte) error
	rename    func(oldpath, newpath string) error
}

func osInstallOps() installOps { return installOps{writeFile: writeSynced, rename: os.Rename} }

// Install atomically replaces workDir/<spec dir> with the bundle's files
// (mode 0600, fsynced): it writes them into a temp dir inside workDir, moves
// the old credential dir aside, renames the new one into place and removes
// the old one. On any failure the old credential dir is put back as it was.
// An install interrupted by a crash is repaired by the next Install.
func (b *Bundle) Install(workDir string) error {
	return b.install(workDir, osInstallOps())
}

func (b *Bundle) install(workDir string, ops installOps) error {
	// The new and the old credential dirs sit beside the target, so that
	// each move is a rename within one directory.
	target := filepath.Join(workDir, filepath.FromSlash(b.spec.Dir))
	parent, base := filepath.Split(target)
	fresh := filepath.Join(parent, "."+base+".bundle-new")
	old := filepath.Join(parent, "."+base+".bundle-old")
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("install bundle: %w", err)
	}
	if err := repairInterrupted(target, fresh, old); err != nil {
		return fmt.Errorf("install bundle: repair an interrupted install in %s: %w", workDir, err)
	}
	if err := os.Mkdir(fresh, 0o700); err != nil {
		return fmt.Errorf("install bundle: %w", err)
	}
	if err := b.writeAll(fresh, ops); err != nil {
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("install bundle into %s: %w", workDir, err)
	}
	_, err := os.Lstat(target)
	hadOld := err == nil
	if hadOld {
		if err := ops.rename(target, old); err != nil {
			_ = os.RemoveAll(fresh)
			return fmt.Errorf("install bundle: move the old credentials aside: %w", err)
		}
	}
	if err := ops.rename(fresh, target); err != nil {
		if hadOld {
			// The restore must not go through ops: it is the way back.
			if rerr := os.Rename(old, target); rerr != nil {
				return fmt.Errorf("install bundle: %w; and restoring the old credentials failed: %v (they are in %s)", err, rerr, old)
			}
		}
		_ = os.RemoveAll(fresh)
		return fmt.Errorf("install bundle: move the new credentials into place: %w", err)
	}
	_ = syncDir(parent) // the rename is done; a failed dir fsync only weakens durability
	if hadOld {
		_ = os.RemoveAll(old) // a leftover is removed by the next Install
	}
	return nil
}

func (b *Bundle) writeAll(dir string, ops installOps) error {
	for _, f := range b.files {
		if err := ops.writeFile(filepath.Join(dir, f.name), f.data); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// repairInterrupted finishes or undoes an install a crash interrupted: the
// old credentials go back when the new ones never arrived, and leftovers go.
func repairInterrupted(target, fresh, old string) error {
	if _, err := os.Lstat(old); err == nil {
		if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
			if err := os.Rename(old, target); err != nil {
				return err
			}
		} else if err := os.RemoveAll(old); err != nil {
			return err
		}
	}
	return os.RemoveAll(fresh)
}

// writeSynced creates path with mode 0600 and fsyncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	return errors.Join(werr, serr, cerr)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	return errors.Join(serr, d.Close())
}
