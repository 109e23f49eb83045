package anthropic

import (
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// The error types Anthropic's API answers with.
const (
	errInvalidRequest = "invalid_request_error"
	errAuthentication = "authentication_error"
	errNotFound       = "not_found_error"
	errRequestTooBig  = "request_too_large"
	errRateLimit      = "rate_limit_error"
	errAPI            = "api_error"
	errOverloaded     = "overloaded_error"
)

// statusOverloaded is Anthropic's "overloaded" status; net/http has no name for it.
const statusOverloaded = 529

// types names each kind of failure the way Anthropic does.
var types = [...]string{
	apierr.Internal:         errAPI,
	apierr.InvalidRequest:   errInvalidRequest,
	apierr.Unauthorized:     errAuthentication,
	apierr.NotFound:         errNotFound,
	apierr.MethodNotAllowed: errInvalidRequest,
	apierr.RequestTimeout:   errInvalidRequest,
	apierr.Conflict:         errAPI,
	apierr.TooLarge:         errRequestTooBig,
	apierr.RateLimited:      errRateLimit,
	apierr.Canceled:         errInvalidRequest,
	apierr.Upstream:         errAPI,
	apierr.Unavailable:      errOverloaded,
	apierr.Timeout:          errAPI,
}

// WriteError writes an error in Anthropic's shape,
// {"type":"error","error":{"type":typ,"message":message},"request_id":id},
// with status. The request id is the one the response's X-Request-Id
// header carries (with tracing on, it holds the trace id), left out when
// there is none.
func WriteError(w http.ResponseWriter, status int, typ, message string) {
	b := appendErrorBody(make([]byte, 0, 96+len(message)), typ, message)
	if id := w.Header().Get("X-Request-Id"); id != "" {
		b = append(b[:len(b)-1], `,"request_id":`...)
		b = append(jsonx.AppendString(b, id), '}')
	}
	httpx.WriteJSON(w, status, b)
}

// WriteProblem answers p in Anthropic's shape, with Retry-After when p has a
// hint. An empty pool (Unavailable) is Anthropic's 529 overloaded_error,
// which its clients back off from and retry.
func WriteProblem(w http.ResponseWriter, p *apierr.Problem) {
	status := p.Status
	if p.Class == apierr.Unavailable {
		status = statusOverloaded
	}
	if s := p.RetryAfterSeconds(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	WriteError(w, status, types[p.Class], p.Message)
}

func appendErrorBody(b []byte, typ, message string) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonx.AppendString(b, typ)
	b = append(b, `,"message":`...)
	b = jsonx.AppendString(b, message)
	return append(b, "}}"...)
}

// streamErrorType is the type of an in-stream error event: clients retry on
// overloaded_error, so capacity problems say so; anything else is api_error.
func streamErrorType(p *apierr.Problem) string {
	switch p.Class {
	case apierr.RateLimited, apierr.Unavailable:
		return errOverloaded
	}
	return errAPI
}
