// Package bundle owns sealed session bundles: the credential files of one
// worker's work dir, packed behind a manifest and sealed, so another replica
// or a wiped disk can start the account without a login. It holds the
// format (Pack, Seal, Open, Install, and OpenPlain for the Python gateway's
// unsealed exports), their storage (MemoryStore, or RedisStore beside the
// session store, sharing its redisconn.Conn), and the Service that exports,
// imports, saves and restores them for the workers. It must not run
// workers (the supervisor does; the service reaches their work dirs through
// Instances) nor hold leases (a lease's token comes in through
// Config.Token).
package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/pool/worker"
)

// A session bundle is the credential files of one worker's work dir (those
// its driver's Spec names, e.g. cache/id and cache/user), packed as tar.gz
// behind a manifest.json and sealed with AES-256-GCM. It lets another replica
// or a wiped disk start the account without logging in again. Open verifies a
// bundle completely before Install touches a work dir.
//
// Sealed layout: one version byte, a 12-byte random nonce, then the GCM
// ciphertext of the tar.gz; the associated data binds the version byte.

// Bundle errors. Callers map them with errors.Is: ErrSeal and ErrChecksum
// mean "authentic-looking but wrong" (HTTP 422), ErrMalformed "not a valid
// bundle" (HTTP 400).
var (
	// ErrSeal: the bundle does not open with the key (wrong key, tampered or
	// truncated bytes, unknown version).
	ErrSeal = errors.New("bundle seal does not verify (wrong POOLGATE_BUNDLE_KEY or tampered bundle)")
	// ErrChecksum: the bundle opened but a file or the payload does not match
	// its manifest checksum.
	ErrChecksum = errors.New("bundle checksum mismatch")
	// ErrMalformed: the bundle's content is not an acceptable bundle (bad
	// gzip/tar/manifest, a disallowed entry or path, too large, a required
	// file missing).
	ErrMalformed = errors.New("malformed bundle")
	// ErrNoCredentials: the work dir has no complete set of credential files
	// (the worker is not logged in).
	ErrNoCredentials = errors.New("no credentials in the work dir")
	// ErrNoKey: bundles are disabled because no key is configured.
	ErrNoKey = errors.New("session bundles are disabled: set POOLGATE_BUNDLE_KEY to standard base64 of 32 bytes (e.g. openssl rand -base64 32)")
	// ErrWrongAccount: the bundle belongs to another account than the
	// instance it was meant for.
	ErrWrongAccount = errors.New("bundle belongs to another account")
	// ErrNoAccount: an unsealed bundle came without the account it is
	// for. Nothing in it proves whose it is, so the importer must say.
	ErrNoAccount = errors.New("the unsealed bundle names no account")
)

const (
	// KeySize is the length of a bundle key in bytes (AES-256).
	KeySize = 32

	sealVersion  byte = 1
	nonceSize         = 12
	manifestName      = "manifest.json"
	// maxManifest bounds manifest.json inside a bundle, in bytes.
	maxManifest = 64 << 10
)

// sealAD is the associated data of version 1; it binds the version byte.
var sealAD = []byte("poolgate-bundle-v1")

// Spec names a driver's credential files inside a work dir: its
// worker.Kind's Credentials, which has the same fields and converts to it.
type Spec struct {
	// Dir is the credential directory relative to the work dir: one path
	// element (e.g. "cache"), or a few joined by "/" when the worker keeps
	// its login deeper ("config/.auth"); never absolute, never "." or "..".
	// Required.
	Dir string
	// Required are file names in Dir that must all exist for the work dir to
	// count as logged in, and that every bundle must carry (e.g. "id",
	// "user").
	Required []string
	// MachineIDFile names the file in Dir whose content is the machine id
	// the credentials are bound to (e.g. "id"); "" when none.
	MachineIDFile string
	// ExpiryFile names a JSON file in Dir with an "expiresAt" field (RFC 3339
	// or Unix seconds/milliseconds), copied to the manifest when readable;
	// "" when the driver knows no expiry.
	ExpiryFile string
}

// maxDirDepth bounds the path elements of a credential dir.
const maxDirDepth = 4

func (s Spec) validate() error {
	els := strings.Split(s.Dir, "/")
	ok := s.Dir != "" && len(els) <= maxDirDepth && !strings.ContainsAny(s.Dir, "\\\x00")
	for _, el := range els {
		ok = ok && el != "" && el != "." && el != ".."
	}
	if !ok {
		return fmt.Errorf("bundle spec: credential dir %q must be a relative path of at most %d elements (no empty, . or .. element)", s.Dir, maxDirDepth)
	}
	for _, name := range s.Required {
		if !validFileName(name) {
			return fmt.Errorf("bundle spec: required file %q must be a plain file name", name)
		}
	}
	return nil
}

// Limits bounds what Open accepts. Zero fields take the defaults.
type Limits struct {
	// MaxSealed caps the sealed bundle, in bytes. Default 1 MiB.
	MaxSealed int
	// MaxUnpacked caps the total size of the files inside, in bytes.
	// Default 4 MiB.
	MaxUnpacked int64
	// MaxFiles caps the number of files inside (the manifest excluded).
	// Default 64.
	MaxFiles int
}

func (l Limits) withDefaults() Limits {
	worker.Default(&l.MaxSealed, 1<<20)
	worker.Default(&l.MaxUnpacked, 4<<20)
	worker.Default(&l.MaxFiles, 64)
	return l
}

// Manifest describes a bundle; it is the first entry of the tar.
type Manifest struct {
	// Version is the manifest format, 1.
	Version int `json:"version"`
	// Account is the account the credentials belong to.
	Account string `json:"account"`
	// Dir is the credential directory the files came from and go back to.
	Dir string `json:"dir"`
	// MachineID is the machine id the credentials are bound to, when known.
	MachineID string     `json:"machine_id,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Files lists every file in Dir, sorted by name.
	Files []ManifestFile `json:"files"`
	// PayloadSHA256 is the hex sha256 of the files in manifest order, each
	// as name, NUL, decimal size, NUL, content.
	PayloadSHA256 string `json:"payload_sha256"`
}

// ManifestFile is one credential file in a bundle.
type ManifestFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// ParseKey decodes POOLGATE_BUNDLE_KEY: standard base64 of exactly 32 bytes.
func ParseKey(b64 string) ([]byte, error) {
	s := strings.TrimSpace(b64)
	if s == "" {
		return nil, errors.New("bundle key is empty; generate one with: openssl rand -base64 32")
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("bundle key is not standard base64 (generate one with: openssl rand -base64 32): %w", err)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("bundle key decodes to %d bytes, want %d (generate one with: openssl rand -base64 32)", len(key), KeySize)
	}
	return key, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("bundle key is %d bytes, want %d", len(key), KeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("bundle key: %w", err)
	}
	return cipher.NewGCM(block)
}

// Seal encrypts payload (a bundle's tar.gz) under key with a fresh random
// nonce. Pack calls it; it is exported for tools and tests that build
// bundles by hand.
func Seal(key, payload []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 1+nonceSize, 1+nonceSize+len(payload)+aead.Overhead())
	out[0] = sealVersion
	if _, err := rand.Read(out[1 : 1+nonceSize]); err != nil {
		return nil, fmt.Errorf("bundle nonce: %w", err)
	}
	return aead.Seal(out, out[1:1+nonceSize], payload, sealAD), nil
}

// unseal reverses Seal; every failure is ErrSeal.
func unseal(key, sealed []byte) ([]byte, error) {
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	if len(sealed) < 1+nonceSize+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrSeal, len(sealed))
	}
	if sealed[0] != sealVersion {
		return nil, fmt.Errorf("%w: unknown version %d", ErrSeal, sealed[0])
	}
	plain, err := aead.Open(nil, sealed[1:1+nonceSize], sealed[1+nonceSize:], sealAD)
	if err != nil {
		return nil, ErrSeal
	}
	return plain, nil
}

// HasCredentials reports whether workDir holds every required credential
// file of spec as a non-empty regular file.
func HasCredentials(workDir string, spec Spec) bool {
	if len(spec.Required) == 0 {
		return false
	}
	for _, name := range spec.Required {
		fi, err := os.Lstat(filepath.Join(workDir, spec.Dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			return false
		}
	}
	return true
}

// Pack reads the credential files of workDir (the regular files directly in
// spec.Dir; subdirectories and symlinks are left out), describes them in a
// manifest for account, and seals the tar.gz under key. It returns
// ErrNoCredentials when a required file is missing or empty.
func Pack(workDir string, spec Spec, account string, key []byte, now time.Time) ([]byte, Manifest, error) {
	if err := spec.validate(); err != nil {
		return nil, Manifest{}, err
	}
	if !HasCredentials(workDir, spec) {
		return nil, Manifest{}, fmt.Errorf("pack %s: %w (want %s/%s)", workDir, ErrNoCredentials, spec.Dir, strings.Join(spec.Required, ", "))
	}
	files, err := readCredFiles(filepath.Join(workDir, spec.Dir), Limits{}.withDefaults())
	if err != nil {
		return nil, Manifest{}, fmt.Errorf("pack %s: %w", workDir, err)
	}
	m := newManifest(account, spec, files, now)
	payload, err := writeTarGz(m, files)
	if err != nil {
		return nil, Manifest{}, fmt.Errorf("pack %s: %w", workDir, err)
	}
	sealed, err := Seal(key, payload)
	if err != nil {
		return nil, Manifest{}, err
	}
	return sealed, m, nil
}

// credFile is one credential file: its name in the credential dir and data.
type credFile struct {
	name string
	data []byte
}

func readCredFiles(dir string, lim Limits) ([]credFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []credFile
	var total int64
	for _, e := range entries { // ReadDir sorts by name
		if !e.Type().IsRegular() || !validFileName(e.Name()) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if errors.Is(err, fs.ErrNotExist) {
			continue // a temp file renamed away meanwhile
		}
		if err != nil {
			return nil, err
		}
		total += int64(len(data))
		if total > lim.MaxUnpacked || len(files) >= lim.MaxFiles {
			return nil, fmt.Errorf("credential dir %s exceeds the bundle limits (%d files, %d bytes)", dir, lim.MaxFiles, lim.MaxUnpacked)
		}
		files = append(files, credFile{name: e.Name(), data: data})
	}
	return files, nil
}

func validFileName(name string) bool {
	return name != "" && name != "." && name != ".." && name != manifestName && !strings.ContainsAny(name, "/\\\x00")
}

// parseExpiry reads "expiresAt" from a JSON document: an RFC 3339 string or
// Unix seconds or milliseconds. Anything else gives nil (expiry unknown).
func parseExpiry(data []byte) *time.Time {
	var doc struct {
		ExpiresAt json.RawMessage `json:"expiresAt"`
	}
	if json.Unmarshal(data, &doc) != nil || len(doc.ExpiresAt) == 0 {
		return nil
	}
	var t time.Time
	if json.Unmarshal(doc.ExpiresAt, &t) == nil && !t.IsZero() {
		t = t.UTC()
		return &t
	}
	n, err := strconv.ParseInt(string(bytes.Trim(doc.ExpiresAt, `"`)), 10, 64)
	if err != nil || n <= 0 {
		return nil
	}
	if n > 1e12 {
		t = time.UnixMilli(n).UTC()
	} else {
		t = time.Unix(n, 0).UTC()
	}
	return &t
}

func payloadDigest(files []credFile) string {
	h := sha256.New()
	for _, f := range files {
		_, _ = io.WriteString(h, f.name+"\x00"+strconv.Itoa(len(f.data))+"\x00")
		_, _ = h.Write(f.data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeTarGz packs the manifest, the credential dir entry and the files.
func writeTarGz(m Manifest, files []credFile) ([]byte, error) {
	mj, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return packTarGz(m.Dir, files, m.CreatedAt, tar.FormatPAX, credFile{name: manifestName, data: mj})
}

// packTarGz writes a tar.gz of top (at the archive's root), the entry of
// the credential dir and its files, every entry dated mod and in format
// (tar.FormatUnknown: the writer's choice).
func packTarGz(dir string, files []credFile, mod time.Time, format tar.Format, top ...credFile) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(h *tar.Header, data []byte) error {
		h.ModTime, h.Format = mod, format
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, f := range top {
		if err := add(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(f.data))}, f.data); err != nil {
			return nil, err
		}
	}
	if err := add(&tar.Header{Name: dir + "/", Typeflag: tar.TypeDir, Mode: 0o700}, nil); err != nil {
		return nil, err
	}
	for _, f := range files {
		h := &tar.Header{Name: dir + "/" + f.name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(f.data))}
		if err := add(h, f.data); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(tw.Close(), gz.Close()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// names lists the manifest's file names.
func (m Manifest) names() []string {
	out := make([]string, len(m.Files))
	for i, f := range m.Files {
		out[i] = f.Name
	}
	return out
}

// hasFile reports whether the manifest lists name.
func (m Manifest) hasFile(name string) bool { return slices.Contains(m.names(), name) }

// newManifest describes files, the credential files of account's work dir
// laid out as spec says, as of now.
func newManifest(account string, spec Spec, files []credFile, now time.Time) Manifest {
	m := Manifest{Version: 1, Account: account, Dir: spec.Dir, CreatedAt: now.UTC().Truncate(time.Second)}
	for _, f := range files {
		sum := sha256.Sum256(f.data)
		m.Files = append(m.Files, ManifestFile{Name: f.name, Size: int64(len(f.data)), SHA256: hex.EncodeToString(sum[:])})
		if f.name == spec.MachineIDFile {
			m.MachineID = strings.TrimSpace(string(f.data))
		}
		if f.name == spec.ExpiryFile {
			m.ExpiresAt = parseExpiry(f.data)
		}
	}
	m.PayloadSHA256 = payloadDigest(files)
	return m
}
