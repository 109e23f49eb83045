package gemini

import (
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// statusName is google.rpc.Code's name for an HTTP status, as Google's
// APIs pair them.
func statusName(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
		return "INVALID_ARGUMENT"
	case http.StatusUnauthorized:
		return "UNAUTHENTICATED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusRequestTimeout, http.StatusGatewayTimeout:
		return "DEADLINE_EXCEEDED"
	case http.StatusConflict:
		return "ABORTED"
	case http.StatusTooManyRequests:
		return "RESOURCE_EXHAUSTED"
	case apierr.StatusClientClosed:
		return "CANCELLED"
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	}
	if status >= 500 {
		return "INTERNAL"
	}
	return "FAILED_PRECONDITION"
}

// WriteProblem answers p in Google's error shape,
// {"error":{"code","message","status"}}, with its HTTP status. A retry hint
// goes out as Retry-After and as the google.rpc.RetryInfo detail Google's
// clients read their back-off from.
func WriteProblem(w http.ResponseWriter, p *apierr.Problem) {
	if s := p.RetryAfterSeconds(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	httpx.WriteJSON(w, p.Status, appendError(make([]byte, 0, 128+len(p.Message)), p))
}

// appendError appends p's error body.
func appendError(b []byte, p *apierr.Problem) []byte {
	b = append(b, `{"error":{"code":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	b = append(b, `,"message":`...)
	b = jsonx.AppendString(b, p.Message)
	b = append(b, `,"status":`...)
	b = jsonx.AppendString(b, statusName(p.Status))
	if s := p.RetryAfterSeconds(); s > 0 {
		b = append(b, `,"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"`...)
		b = strconv.AppendInt(b, int64(s), 10)
		b = append(b, `s"}]`...)
	}
	return append(b, "}}"...)
}
