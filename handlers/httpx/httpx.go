// Package httpx holds the HTTP plumbing shared by the protocol packages under
// handlers: the one SSE writer, request-scoped values the gin middleware puts
// into the request context, and bounded body reading. It imports no web
// framework, so protocol packages stay on plain net/http.
package httpx

import (
	"context"
	"errors"
	"io"
	"net/http"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyAPIKey
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

// WithAPIKey returns ctx carrying the caller's API key (used only to keep
// callers' conversations apart; never logged).
func WithAPIKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, keyAPIKey, key)
}

// APIKey returns the caller's API key from ctx ("" when auth is off).
func APIKey(ctx context.Context) string {
	s, _ := ctx.Value(keyAPIKey).(string)
	return s
}

// ErrBodyTooLarge is returned by ReadBody when the body exceeds its cap.
var ErrBodyTooLarge = errors.New("request body too large")

// ReadBody reads the whole request body. The middleware already wrapped it in
// http.MaxBytesReader; ReadBody turns that cap into ErrBodyTooLarge.
func ReadBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, ErrBodyTooLarge
	}
	return b, err
}
