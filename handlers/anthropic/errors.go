package anthropic

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"

	"github.com/poolgate/poolgate/handlers/httpx"
)

// Anthropic error types (https://docs.anthropic.com/en/api/errors).
const (
	errInvalidRequest = "invalid_request_error"
	errNotFound       = "not_found_error"
	errRequestTooBig  = "request_too_large"
	errRateLimit      = "rate_limit_error"
	errAPI            = "api_error"
	errOverloaded     = "overloaded_error"
)

// statusOverloaded is Anthropic's "overloaded" status; net/http has no name for it.
const statusOverloaded = 529

// WriteError writes an error in Anthropic's shape,
// {"type":"error","error":{"type":typ,"message":message}}, with status.
// The gin middleware uses it for authentication_error, not_found_error and
// request_too_large, so every answer on /v1/messages has one shape.
func WriteError(w http.ResponseWriter, status int, typ, message string) {
	b := make([]byte, 0, 64+len(message))
	b = appendErrorBody(b, typ, message)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client may be gone; nothing left to tell it
}

func appendErrorBody(b []byte, typ, message string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonx.AppendString(b, typ)
	b = append(b, `,"message":`...)
	b = jsonx.AppendString(b, message)
	return append(b, "}}"...)
}

// wireError is one domain error as Anthropic reports it.
type wireError struct {
	status     int
	typ        string
	message    string
	retryAfter time.Duration
}

// mapError is this protocol's one mapper from domain errors to the wire
// (STYLE 11). Overload and rate limits are 429 with Retry-After; an empty pool
// is 529 overloaded_error, which Anthropic clients back off from and retry.
func mapError(err error) wireError {
	var (
		reqErr *requestError
		over   *chat.OverloadedError
		rate   *chat.RateLimitedError
		up     *chat.UpstreamError
		policy *chat.PolicyError
	)
	switch {
	case errors.As(err, &reqErr):
		return wireError{http.StatusBadRequest, errInvalidRequest, reqErr.msg, 0}
	case errors.As(err, &policy):
		return wireError{http.StatusBadRequest, errInvalidRequest, policy.Message, 0}
	case errors.Is(err, httpx.ErrBodyTooLarge):
		return wireError{http.StatusRequestEntityTooLarge, errRequestTooBig, "request body too large", 0}
	case errors.Is(err, httpx.ErrBodyTimeout):
		return wireError{http.StatusRequestTimeout, errInvalidRequest, err.Error(), 0}
	case errors.As(err, &over):
		return wireError{http.StatusTooManyRequests, errRateLimit, "the gateway is at capacity, retry later", max(over.RetryAfter, time.Second)}
	case errors.As(err, &rate):
		return wireError{http.StatusTooManyRequests, errRateLimit, "upstream rate limit: " + rate.Message, rate.RetryAfter}
	case errors.Is(err, chat.ErrNoInstance), errors.Is(err, chat.ErrNotLoggedIn):
		return wireError{statusOverloaded, errOverloaded, "no backend instance is ready to serve: " + err.Error(), 0}
	case errors.As(err, &up):
		return wireError{http.StatusBadGateway, errAPI, up.Error(), 0}
	case errors.Is(err, chat.ErrWorkerGone):
		return wireError{http.StatusBadGateway, errAPI, err.Error(), 0}
	case errors.Is(err, context.DeadlineExceeded):
		return wireError{http.StatusGatewayTimeout, errAPI, "the request timed out", 0}
	default:
		// No details: an unexpected error may carry internals.
		return wireError{http.StatusInternalServerError, errAPI, "internal error", 0}
	}
}

func writeMapped(w http.ResponseWriter, err error) {
	we := mapError(err)
	if we.retryAfter > 0 {
		secs := int((we.retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	WriteError(w, we.status, we.typ, we.message)
}

// streamErrorType is the type of an in-stream error event: clients retry on
// overloaded_error, so capacity problems say so.
func streamErrorType(err error) string {
	switch mapError(err).status {
	case http.StatusTooManyRequests, statusOverloaded:
		return errOverloaded
	}
	return errAPI
}
