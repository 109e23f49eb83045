package admin

import (
	"bufio"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/session/bundle"
)

// A plain bundle (the Python gateway's export of a whole work dir) may be
// up to bundle.MaxPlain (64 MiB) as a tar.gz, a third more in base64. An
// import that names its target with ?instance= streams: the body's JSON is
// read token by token, the bundle's base64 is decoded as it arrives into a
// temp file, and the tar.gz is then read from there keeping only the
// credential files. Nothing the size of the bundle is held in memory.

// maxPlainImportBody caps the body of a plain import: the base64 of the
// largest plain bundle, plus room for the other fields.
const maxPlainImportBody = bundle.MaxPlain/3*4 + 8 + 64<<10

// maxSealedB64 caps the base64 of a sealed bundle (at most 1 MiB decoded).
const maxSealedB64 = maxBundleBody

// streamedImport is an import body read as a stream: the fields, the
// sealed bundle (small, in memory) or the plain one (in a temp file).
type streamedImport struct {
	body     bundleJSON
	sealed   []byte
	plain    *os.File // nil: no bundle_b64; removed by close
	plainLen int64
}

func (s *streamedImport) close() {
	if s.plain != nil {
		_ = s.plain.Close()
		_ = os.Remove(s.plain.Name())
	}
}

// errBadBody marks an import body that is not the export's JSON.
var errBadBody = errors.New("bad import body")

// readStreamed reads an import body from r: the export's JSON, or a bare
// bundle (readBare). A plain bundle is refused before anything is written
// when plain is false.
func readStreamed(body io.Reader, plain bool) (*streamedImport, error) {
	s := &streamedImport{}
	r := bufio.NewReader(body)
	first, err := peekNonSpace(r)
	if err != nil {
		return s, fmt.Errorf("%w: empty body", errBadBody)
	}
	if first != '{' {
		return s, s.readBare(r, first, plain)
	}
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return s, fmt.Errorf("%w: want a JSON object", errBadBody)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return s, fmt.Errorf("%w: %w", errBadBody, err)
		}
		key, _ := tok.(string)
		switch key {
		case "instance":
			err = dec.Decode(&s.body.Instance)
		case "account":
			err = dec.Decode(&s.body.Account)
		case "bytes":
			err = dec.Decode(&s.body.Bytes)
		case "raw_bytes":
			err = dec.Decode(&s.body.RawBytes)
		case "picked":
			err = dec.Decode(&s.body.Picked)
		case "bundle", "bundle_b64":
			if key == "bundle_b64" && !plain {
				return s, errPlainOff
			}
			r, dec, err = s.readBundleValue(key, bufio.NewReader(io.MultiReader(dec.Buffered(), r)))
		default:
			return s, fmt.Errorf("%w: unknown field %q", errBadBody, key)
		}
		if err != nil {
			return s, fmt.Errorf("%w: %s: %w", errBadBody, key, err)
		}
	}
	if _, err := dec.Token(); err != nil { // the closing }
		return s, fmt.Errorf("%w: %w", errBadBody, err)
	}
	return s, nil
}

// readBundleValue reads the bundle's value straight from rest, what
// follows its key, and returns the reader and a decoder that go on from
// after it, as inside an object.
func (s *streamedImport) readBundleValue(key string, rest *bufio.Reader) (*bufio.Reader, *json.Decoder, error) {
	err := expectValue(rest)
	if err == nil {
		decoded := base64.NewDecoder(base64.StdEncoding, &b64String{r: rest})
		if key == "bundle" {
			s.sealed, err = readCapped(decoded, maxSealedB64)
		} else {
			err = s.spoolPlain(decoded)
		}
	}
	dec := json.NewDecoder(io.MultiReader(strings.NewReader(`{"_":0`), rest))
	for range 3 { // {, "_", 0
		if _, terr := dec.Token(); terr != nil && err == nil {
			err = terr
		}
	}
	return rest, dec, err
}

// readBare reads a bare bundle: the base64 alone, as it sat in the Python
// gateway's LINGMA_SESSION_BUNDLE (or as one JSON string), with no JSON
// around it to name an instance or account; the query names the target.
// The decoded bytes say which kind it is: a tar.gz is a plain bundle, and
// anything else is taken for a sealed one, which opening checks.
func (s *streamedImport) readBare(r *bufio.Reader, first byte, plain bool) error {
	var text io.Reader = &bareBase64{r: r}
	if first == '"' {
		_, _ = r.ReadByte()
		text = &b64String{r: r}
	}
	decoded := bufio.NewReader(base64.NewDecoder(base64.StdEncoding, text))
	head, err := decoded.Peek(2)
	if err != nil {
		return fmt.Errorf("%w: not the export's JSON, nor the base64 of a bundle: %w", errBadBody, err)
	}
	if head[0] != 0x1f || head[1] != 0x8b {
		s.sealed, err = readCapped(decoded, maxSealedB64)
	} else if !plain {
		return errPlainOff
	} else {
		err = s.spoolPlain(decoded)
	}
	if err != nil {
		return fmt.Errorf("%w: bare bundle: %w", errBadBody, err)
	}
	return nil
}

// spoolPlain copies the plain bundle, decoded, into a temp file.
func (s *streamedImport) spoolPlain(decoded io.Reader) error {
	f, err := os.CreateTemp("", "poolgate-import-*.tar.gz")
	if err != nil {
		return err
	}
	s.plain = f
	n, err := io.Copy(f, io.LimitReader(decoded, bundle.MaxPlain+1))
	s.plainLen = n
	switch {
	case err != nil:
		return err
	case n > bundle.MaxPlain:
		return errTooLarge
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

var (
	errPlainOff = errors.New("plain bundles are off")
	errTooLarge = errors.New("bundle over its cap")
)

// readCapped reads r whole, or fails with errTooLarge past max bytes.
func readCapped(r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err == nil && int64(len(b)) > max {
		err = errTooLarge
	}
	return b, err
}

// expectValue reads the `: "` between a key and its string value.
func expectValue(r *bufio.Reader) error {
	if err := expectByte(r, ':'); err != nil {
		return err
	}
	return expectByte(r, '"')
}

// peekNonSpace skips white space and returns the next byte, unread.
func peekNonSpace(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.Peek(1)
		if err != nil {
			return 0, err
		}
		if !isSpace(b[0]) {
			return b[0], nil
		}
		_, _ = r.ReadByte()
	}
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// bareBase64 is base64 text up to EOF with its white space (line breaks of
// a wrapped encoding, a final newline) left out.
type bareBase64 struct{ r *bufio.Reader }

func (s *bareBase64) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		b, err := s.r.ReadByte()
		if err != nil {
			if n > 0 && errors.Is(err, io.EOF) {
				return n, nil
			}
			return n, err
		}
		if !isSpace(b) {
			p[n] = b
			n++
		}
	}
	return n, nil
}

func expectByte(r *bufio.Reader, want byte) error {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return err
		}
		switch {
		case b == want:
			return nil
		case isSpace(b):
		default:
			return fmt.Errorf("want %q, got %q", want, b)
		}
	}
}

// b64String reads the characters of a JSON string up to its closing quote,
// then EOF.
type b64String struct {
	r    *bufio.Reader
	done bool
}

func (s *b64String) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && !s.done {
		b, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		switch b {
		case '"':
			s.done = true
		case '\\':
			e, err := s.r.ReadByte()
			if err != nil {
				return n, io.ErrUnexpectedEOF
			}
			switch e {
			case '/':
				p[n] = '/'
				n++
			case 'n', 'r':
			default:
				return n, fmt.Errorf("escape \\%c in base64", e)
			}
		default:
			p[n] = b
			n++
		}
	}
	if n == 0 && s.done {
		return 0, io.EOF
	}
	return n, nil
}

// importNamed imports into the instance the query names, streaming the
// body (importstream.go).
func (a *Admin) importNamed(c *gin.Context, svc BundleService, name string) {
	s, err := readStreamed(c.Request.Body, a.cfg.BundleImportPlain)
	defer s.close()
	if err != nil {
		writeImportReadError(c, err)
		return
	}
	plain := s.plain != nil
	switch {
	case plain && s.sealed != nil:
		writeError(c, http.StatusBadRequest, CodeBadRequest, `send either "bundle" (sealed) or "bundle_b64" (plain), not both`)
		return
	case !plain && s.body.RawBytes != nil:
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"raw_bytes" goes with "bundle_b64" (a plain bundle); a sealed "bundle" has "bytes"`)
		return
	case !plain && len(s.sealed) == 0:
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"bundle" is required (standard base64 of the sealed bundle)`)
		return
	case plain && s.body.RawBytes != nil && int64(*s.body.RawBytes) != s.plainLen:
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"raw_bytes" says `+strconv.Itoa(*s.body.RawBytes)+
			" but the bundle decodes to "+strconv.FormatInt(s.plainLen, 10)+" bytes (truncated copy?)")
		return
	case !plain && s.body.Bytes != nil && *s.body.Bytes != len(s.sealed):
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"bytes" says `+strconv.Itoa(*s.body.Bytes)+
			" but the bundle decodes to "+strconv.Itoa(len(s.sealed))+" bytes (truncated copy?)")
		return
	}
	action, format, n := "session_import", "sealed", int64(len(s.sealed))
	if plain {
		action, format, n = "session_import_plain", "plain", s.plainLen
		err = svc.ImportPlain(c.Request.Context(), name, cmp.Or(s.body.Account, c.Query("account")), s.plain)
	} else {
		err = svc.Import(c.Request.Context(), name, s.sealed)
	}
	a.imported(c, name, s.body, action, format, n, err)
}

// writeImportReadError answers a body that could not be read.
func writeImportReadError(c *gin.Context, err error) {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errPlainOff):
		writeError(c, http.StatusForbidden, CodeForbidden,
			"unsealed bundles (bundle_b64, or a bare base64 tar.gz) are not accepted: set POOLGATE_BUNDLE_IMPORT_PLAIN=true to import the Python gateway's exports")
	case errors.As(err, &mbe), errors.Is(err, errTooLarge):
		writeError(c, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "body over its cap: a sealed bundle is at most 1 MiB, "+
			"a plain one (bundle_b64, with POOLGATE_BUNDLE_IMPORT_PLAIN) 64 MiB")
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(c, http.StatusRequestTimeout, CodeBodyTimeout, "the request body did not arrive in time")
	default:
		writeError(c, http.StatusBadRequest, CodeBadRequest,
			`body must be the export's JSON {"instance", "account", "bundle": "<base64>", "bytes"} (or the Python gateway's, with "bundle_b64"), `+
				"or a bundle's bare base64 (what LINGMA_SESSION_BUNDLE held): "+err.Error())
	}
}
