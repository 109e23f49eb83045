// Package httpx holds the plain HTTP plumbing shared by the handlers: the
// request id the gin middleware puts into the request context, the
// caller's key as the edge identified it, bounded body reading,
// JSON answers and the record of request fields a decoder dropped. It
// imports no web framework, so protocol packages stay on plain net/http.
package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/poolgate/poolgate/internal/access"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
)

// WithRequestID returns ctx carrying the request id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, keyRequestID, id)
}

// RequestID returns the request id put into ctx by the middleware ("" if none).
func RequestID(ctx context.Context) string {
	s, _ := ctx.Value(keyRequestID).(string)
	return s
}

// Owner returns what keeps the caller's conversations and stored Responses
// apart from everyone else's, as the edge established it (digests of its
// key, carried on a hop from another replica).
func Owner(ctx context.Context) access.Owner { return access.From(ctx).Owner }

// ErrBodyTooLarge is returned by ReadBody when the body exceeds its cap.
var ErrBodyTooLarge = errors.New("request body too large")

// ErrBodyTimeout is returned by ReadBody when the body did not arrive
// within the time the middleware allows it.
var ErrBodyTimeout = errors.New("the request body did not arrive in time")

// ReadBody reads the whole request body, a JSON text. The middleware
// already capped it in size and time; ReadBody turns those caps into
// ErrBodyTooLarge and ErrBodyTimeout, and refuses JSON that nests deeper
// than MaxDepth with ErrTooDeep, before any decoder reads it.
//
// A body that declares its length is read into a buffer of that size, not
// grown from 512 bytes by doubling as io.ReadAll does: an agent's turn is
// tens of KiB, and a large body would otherwise cost twice its size while
// it is read. A client that announces a body it never sends holds that
// buffer for the body timeout at most; on the API, the body budget
// (the edge's body cap) has counted it before it is made.
func ReadBody(r *http.Request) ([]byte, error) {
	b, err := readAll(r.Body, r.ContentLength)
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, ErrBodyTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, ErrBodyTimeout
	case err == nil && !depthOK(b, MaxDepth):
		return nil, ErrTooDeep
	}
	return b, err
}

// readAll is io.ReadAll starting from a buffer of the declared length n
// (plus one byte, so the read that meets the end needs no growth).
func readAll(r io.Reader, n int64) ([]byte, error) {
	if n <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, n+1)
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // the body is longer than declared
		}
	}
}

// WriteJSON answers with a complete JSON body and its length.
func WriteJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a failed write means the client left
}
