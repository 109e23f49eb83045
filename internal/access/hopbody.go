package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// HopBody is a forwarded request's body, read whole before the hop is
// signed (sender) or trusted (receiver): its digest is part of the
// signature, and it can be read again (a hop resent after a fresh proof).
// Up to spoolAbove bytes it is held in memory; a larger one (a plain
// bundle import) goes to a temporary file, so a hop does not hold tens of
// megabytes. Close removes the file.
type HopBody struct {
	data []byte
	file *os.File
	n    int64
	sum  [sha256.Size]byte
}

// spoolAbove is the size from which a body goes to a temporary file.
const spoolAbove = 1 << 20

// ErrHopBodyTooLarge is returned by ReadHopBody for a body over its cap.
var ErrHopBodyTooLarge = errors.New("request body too large to forward")

// NewHopBody is a body already in memory (not copied).
func NewHopBody(b []byte) *HopBody {
	return &HopBody{data: b, n: int64(len(b)), sum: sha256.Sum256(b)}
}

// ReadHopBody reads r to its end, at most max bytes (the whole buffer when
// max is small: the receiver of a hop passes the signed length).
func ReadHopBody(r io.Reader, max int64) (*HopBody, error) {
	if r == nil {
		return NewHopBody(nil), nil
	}
	h := sha256.New()
	var buf bytes.Buffer
	if max <= spoolAbove {
		buf.Grow(int(max) + 1) // a receiver knows the length: no regrowth
	}
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r, spoolAbove+1))
	b := &HopBody{n: n}
	if err == nil && n > spoolAbove {
		err = b.spool(r, h, buf.Bytes(), max)
	} else {
		b.data = buf.Bytes()
	}
	if err == nil && b.n > max {
		err = ErrHopBodyTooLarge
	}
	if err != nil {
		b.Close()
		return nil, err
	}
	copy(b.sum[:], h.Sum(nil))
	return b, nil
}

// spool writes head and the rest of r, up to max bytes in all, to a
// temporary file, hashing the rest into h.
func (b *HopBody) spool(r io.Reader, h io.Writer, head []byte, max int64) error {
	f, err := os.CreateTemp("", "poolgate-hop-*")
	if err != nil {
		return fmt.Errorf("spool a forwarded body: %w", err)
	}
	b.file = f
	if _, err := f.Write(head); err != nil {
		return fmt.Errorf("spool a forwarded body: %w", err)
	}
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, max-b.n+1))
	b.n += n
	if err != nil {
		return err
	}
	return nil
}

// Len is the body's length in bytes.
func (b *HopBody) Len() int64 { return b.n }

// Digest is the body's SHA-256, in hex.
func (b *HopBody) Digest() string { return hex.EncodeToString(b.sum[:]) }

// Reader returns a reader of the whole body, from its start.
func (b *HopBody) Reader() io.Reader {
	if b.file != nil {
		return io.NewSectionReader(b.file, 0, b.n)
	}
	return bytes.NewReader(b.data)
}

// Close removes the temporary file, if there is one. It is safe to call
// twice.
func (b *HopBody) Close() error {
	if b == nil || b.file == nil {
		return nil
	}
	f := b.file
	b.file = nil
	_ = f.Close()
	return os.Remove(f.Name())
}

// hopBodyCloser is a verified hop's body as the request carries it on:
// closing it removes the body's file.
type hopBodyCloser struct {
	io.Reader
	body *HopBody
}

func (c hopBodyCloser) Close() error { return c.body.Close() }
