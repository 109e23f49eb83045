package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxPlainUnpacked caps everything a plain bundle decompresses to: it is a
// whole work dir (logs and caches too), of which only the credential files
// are kept.
const maxPlainUnpacked = MaxPlain

// MaxPlain is the most a plain bundle may hold, compressed or unpacked
// (64 MiB): the cap of its import too.
const MaxPlain = 64 << 20

// OpenPlain reads an unsealed bundle: a tar.gz of a whole work dir, as the
// Python gateway exported it (no manifest, no seal). It keeps the regular
// files directly in spec.Dir and skips every other entry unread; it applies
// the sealed format's checks to what it keeps (no absolute paths, no "..",
// no links or devices in spec.Dir, size and count caps, every required file
// present and non-empty) and bounds the decompression. The bundle is
// described for account; nothing is written.
func OpenPlain(payload []byte, spec Spec, limits Limits, account string, now time.Time) (*Bundle, error) {
	return OpenPlainReader(bytes.NewReader(payload), spec, limits, account, now)
}

// OpenPlainReader is OpenPlain reading the tar.gz from r as it comes: only
// the credential files are kept in memory, so a whole work dir of up to
// 64 MiB unpacked streams through (from a request body, or a file it was
// spooled to).
func OpenPlainReader(r io.Reader, spec Spec, limits Limits, account string, now time.Time) (*Bundle, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	lim := limits.withDefaults()
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: not gzip: %v", ErrMalformed, err)
	}
	tr := tar.NewReader(&capReader{r: gz, n: maxPlainUnpacked})
	kept := keeper{lim: lim, in: " in " + spec.Dir + "/"}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, malformed("bad tar", err)
		}
		name, ok, err := plainEntry(h, spec)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if err := kept.add(tr, h, name); err != nil {
			return nil, err
		}
	}
	// Drain what is left of the stream, so that a truncated or corrupt
	// archive is refused rather than half read.
	if _, err := io.Copy(io.Discard, tr); err != nil {
		return nil, malformed("bad tar", err)
	}
	files := kept.files
	slices.SortFunc(files, func(a, b credFile) int { return strings.Compare(a.name, b.name) })
	m := newManifest(account, spec, files, now)
	if err := verify(m, files, spec); err != nil {
		return nil, err
	}
	return &Bundle{Manifest: m, spec: spec, files: files}, nil
}

// plainEntry checks one entry of a plain bundle: ok with its file name when
// it is a credential file to keep, !ok for an entry to skip. Paths may start
// with "./"; an unsafe path anywhere, or anything but a regular file in the
// credential dir, is refused.
func plainEntry(h *tar.Header, spec Spec) (name string, ok bool, err error) {
	n := strings.TrimPrefix(h.Name, "./")
	if n == "" || n == "." || n == "./" {
		return "", false, nil // the archive's root
	}
	if strings.HasPrefix(n, "/") || strings.ContainsAny(n, "\\\x00") || path.IsAbs(n) {
		return "", false, fmt.Errorf("%w: disallowed path %q", ErrMalformed, h.Name)
	}
	for _, el := range strings.Split(strings.TrimSuffix(n, "/"), "/") {
		if el == ".." || el == "." || el == "" {
			return "", false, fmt.Errorf("%w: disallowed path %q", ErrMalformed, h.Name)
		}
	}
	n = strings.TrimSuffix(n, "/")
	dir, file := path.Split(n)
	switch {
	case n == spec.Dir:
		if h.Typeflag != tar.TypeDir {
			return "", false, fmt.Errorf("%w: %q must be a directory", ErrMalformed, h.Name)
		}
		return "", false, nil
	case dir != spec.Dir+"/" || h.Typeflag == tar.TypeDir:
		return "", false, nil // elsewhere in the work dir, or a subdirectory: not a credential
	case h.Typeflag != tar.TypeReg:
		return "", false, fmt.Errorf("%w: disallowed entry %q of type %q (regular files only)", ErrMalformed, h.Name, string(h.Typeflag))
	case !validFileName(file):
		return "", false, fmt.Errorf("%w: disallowed file name %q", ErrMalformed, h.Name)
	}
	return file, true, nil
}

// PackPlain packs the credential files of workDir (the regular files
// directly in spec.Dir) as a plain bundle: a tar.gz of spec.Dir and those
// files, paths relative to the work dir, with no manifest and no seal. That
// is the form the Python gateway exported a work dir in and unpacks back
// into one (its global session bundle setting), so a login can return to it; only
// the credentials travel, not the logs and caches beside them. It returns
// ErrNoCredentials when a required file is missing or empty.
func PackPlain(workDir string, spec Spec, now time.Time) ([]byte, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if !HasCredentials(workDir, spec) {
		return nil, fmt.Errorf("pack %s: %w (want %s/%s)", workDir, ErrNoCredentials, spec.Dir, strings.Join(spec.Required, ", "))
	}
	files, err := readCredFiles(filepath.Join(workDir, spec.Dir), Limits{}.withDefaults())
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", workDir, err)
	}
	return packTarGz(spec.Dir, files, now.UTC().Truncate(time.Second), tar.FormatUnknown)
}
