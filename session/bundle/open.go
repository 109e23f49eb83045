package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
)

// Bundle is a sealed bundle that Open has fully verified, ready to Install.
type Bundle struct {
	// Manifest describes the bundle; its checksums matched the files.
	Manifest Manifest
	spec     Spec
	files    []credFile
}

// Open decrypts and verifies sealed against spec and limits, entirely in
// memory: size caps, the seal, the tar entries (regular files directly in
// spec.Dir only; no absolute paths, no "..", no links, devices or fifos),
// the manifest, every checksum and the required files. Nothing is written.
// Errors wrap ErrSeal, ErrChecksum or ErrMalformed.
func Open(sealed, key []byte, spec Spec, limits Limits) (*Bundle, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	lim := limits.withDefaults()
	if len(sealed) > lim.MaxSealed {
		return nil, fmt.Errorf("%w: sealed bundle is %d bytes, over the %d-byte limit", ErrMalformed, len(sealed), lim.MaxSealed)
	}
	payload, err := unseal(key, sealed)
	if err != nil {
		return nil, err
	}
	m, files, err := readTarGz(payload, spec, lim)
	if err != nil {
		return nil, err
	}
	if err := verify(m, files, spec); err != nil {
		return nil, err
	}
	return &Bundle{Manifest: m, spec: spec, files: files}, nil
}

// capReader fails once more than n bytes were read: a zip bomb stops here.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, fmt.Errorf("%w: decompressed bundle too large", ErrMalformed)
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}

// readTarGz reads the manifest and the files, checking every entry.
func readTarGz(payload []byte, spec Spec, lim Limits) (Manifest, []credFile, error) {
	gz, err := gzip.NewReader(bytes.NewReader(payload))
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("%w: not gzip: %v", ErrMalformed, err)
	}
	// Headers, padding and the manifest come on top of the file bytes.
	overhead := int64(lim.MaxFiles+4)*3*512 + maxManifest + (1 << 20)
	tr := tar.NewReader(&capReader{r: gz, n: lim.MaxUnpacked + overhead})
	var (
		m       Manifest
		kept    = keeper{lim: lim}
		entries int
	)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Manifest{}, nil, malformed("bad tar", err)
		}
		entries++
		if entries == 1 {
			if m, err = readManifest(tr, h); err != nil {
				return Manifest{}, nil, err
			}
			continue
		}
		name, isDir, err := entryName(h, spec)
		if err != nil {
			return Manifest{}, nil, err
		}
		if isDir {
			continue
		}
		if err := kept.add(tr, h, name); err != nil {
			return Manifest{}, nil, err
		}
	}
	if entries == 0 {
		return Manifest{}, nil, fmt.Errorf("%w: empty archive, no %s", ErrMalformed, manifestName)
	}
	return m, kept.files, nil
}

// keeper reads the files an archive's walk keeps, refusing duplicates and
// what exceeds the limits.
type keeper struct {
	lim Limits
	// in names where the files are, for messages ("" or " in dir/").
	in    string
	files []credFile
	seen  map[string]bool
	total int64
}

// add reads the entry h, at tr, as the file name.
func (k *keeper) add(tr *tar.Reader, h *tar.Header, name string) error {
	if k.seen[name] {
		return fmt.Errorf("%w: duplicate entry %q", ErrMalformed, h.Name)
	}
	if k.seen == nil {
		k.seen = map[string]bool{}
	}
	k.seen[name] = true
	if len(k.files) >= k.lim.MaxFiles {
		return fmt.Errorf("%w: more than %d files%s", ErrMalformed, k.lim.MaxFiles, k.in)
	}
	if h.Size < 0 || k.total+h.Size > k.lim.MaxUnpacked {
		return fmt.Errorf("%w: files%s exceed the %d-byte limit", ErrMalformed, k.in, k.lim.MaxUnpacked)
	}
	data, err := io.ReadAll(io.LimitReader(tr, h.Size))
	if err != nil {
		return malformed("read "+h.Name, err)
	}
	if int64(len(data)) != h.Size {
		return fmt.Errorf("%w: entry %q is truncated", ErrMalformed, h.Name)
	}
	k.total += h.Size
	k.files = append(k.files, credFile{name: name, data: data})
	return nil
}

// malformed wraps err as ErrMalformed, keeping a too-large cause readable.
func malformed(what string, err error) error {
	if errors.Is(err, ErrMalformed) {
		return err
	}
	return fmt.Errorf("%w: %s: %v", ErrMalformed, what, err)
}

func readManifest(tr *tar.Reader, h *tar.Header) (Manifest, error) {
	if h.Name != manifestName || h.Typeflag != tar.TypeReg {
		return Manifest{}, fmt.Errorf("%w: the first entry must be the regular file %s, got %q", ErrMalformed, manifestName, h.Name)
	}
	if h.Size < 0 || h.Size > maxManifest {
		return Manifest{}, fmt.Errorf("%w: %s is %d bytes, over %d", ErrMalformed, manifestName, h.Size, maxManifest)
	}
	raw, err := io.ReadAll(io.LimitReader(tr, h.Size))
	if err != nil {
		return Manifest{}, malformed("read "+manifestName, err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: %s: %v", ErrMalformed, manifestName, err)
	}
	if m.Version != 1 {
		return Manifest{}, fmt.Errorf("%w: manifest version %d, want 1", ErrMalformed, m.Version)
	}
	return m, nil
}

// entryName checks one non-manifest entry and returns its file name in the
// credential dir, or isDir for the credential dir's own entry.
func entryName(h *tar.Header, spec Spec) (name string, isDir bool, err error) {
	n := h.Name
	if n == "" || strings.HasPrefix(n, "/") || strings.ContainsAny(n, "\\\x00") || path.IsAbs(n) {
		return "", false, fmt.Errorf("%w: disallowed path %q", ErrMalformed, h.Name)
	}
	for _, el := range strings.Split(strings.TrimSuffix(n, "/"), "/") {
		if el == ".." || el == "." || el == "" {
			return "", false, fmt.Errorf("%w: disallowed path %q", ErrMalformed, h.Name)
		}
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if strings.TrimSuffix(n, "/") != spec.Dir {
			return "", false, fmt.Errorf("%w: disallowed directory %q (only %s/ may appear)", ErrMalformed, h.Name, spec.Dir)
		}
		return "", true, nil
	case tar.TypeReg:
	default:
		return "", false, fmt.Errorf("%w: disallowed entry %q of type %q (regular files only)", ErrMalformed, h.Name, string(h.Typeflag))
	}
	dir, file := path.Split(n)
	if dir != spec.Dir+"/" || !validFileName(file) {
		return "", false, fmt.Errorf("%w: disallowed path %q (files must be directly in %s/)", ErrMalformed, h.Name, spec.Dir)
	}
	return file, false, nil
}

// verify checks the manifest against spec and the files read.
func verify(m Manifest, files []credFile, spec Spec) error {
	if m.Dir != spec.Dir {
		return fmt.Errorf("%w: manifest dir %q, want %q", ErrMalformed, m.Dir, spec.Dir)
	}
	if len(m.Files) != len(files) {
		return fmt.Errorf("%w: manifest lists %d files, archive holds %d", ErrMalformed, len(m.Files), len(files))
	}
	for i, mf := range m.Files {
		f := files[i]
		if mf.Name != f.name {
			return fmt.Errorf("%w: manifest file %d is %q, archive has %q", ErrMalformed, i, mf.Name, f.name)
		}
		sum := sha256.Sum256(f.data)
		if mf.Size != int64(len(f.data)) || mf.SHA256 != hex.EncodeToString(sum[:]) {
			return fmt.Errorf("%w: %s/%s", ErrChecksum, spec.Dir, f.name)
		}
	}
	if m.PayloadSHA256 != payloadDigest(files) {
		return fmt.Errorf("%w: payload", ErrChecksum)
	}
	for _, name := range spec.Required {
		if !m.hasFile(name) {
			return fmt.Errorf("%w: required file %s/%s is missing", ErrMalformed, spec.Dir, name)
		}
	}
	for _, f := range files {
		if len(f.data) == 0 && slices.Contains(spec.Required, f.name) {
			return fmt.Errorf("%w: required file %s/%s is empty", ErrMalformed, spec.Dir, f.name)
		}
	}
	return nil
}
