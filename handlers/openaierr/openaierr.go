// Package openaierr is OpenAI's error shape, which the chat completions and
// Responses APIs share: each apierr.Class's error type, the JSON body
// {"error":{"message","type","param","code"}} with all four keys (absent
// ones null, as OpenAI's SDKs expect), and the Retry-After header. The
// routes' own errors (authentication, unknown routes) use it too.
package openaierr

import (
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// OpenAI error types. OpenAI itself documents invalid_request_error and
// server_error precisely; the others follow the names its SDKs and most
// compatible servers use.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

var types = [...]string{
	apierr.Internal:         TypeServer,
	apierr.InvalidRequest:   TypeInvalidRequest,
	apierr.Unauthorized:     TypeAuthentication,
	apierr.NotFound:         TypeNotFound,
	apierr.MethodNotAllowed: TypeInvalidRequest,
	apierr.RequestTimeout:   TypeInvalidRequest,
	apierr.Conflict:         TypeServer,
	apierr.TooLarge:         TypeInvalidRequest,
	apierr.RateLimited:      TypeRateLimit,
	apierr.Canceled:         TypeInvalidRequest,
	apierr.Upstream:         TypeServer,
	apierr.Unavailable:      TypeServer,
	apierr.Timeout:          TypeServer,
}

// Type is OpenAI's error type for k.
func Type(k apierr.Class) string { return types[k] }

// Append appends p's error object, {"error":{...}}.
func Append(b []byte, p *apierr.Problem) []byte {
	b = append(b, `{"error":{"message":`...)
	b = jsonx.AppendString(b, p.Message)
	b = append(b, `,"type":`...)
	b = jsonx.AppendString(b, Type(p.Class))
	b = append(b, `,"param":`...)
	b = appendNullable(b, p.Param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, p.Code)
	return append(b, "}}"...)
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonx.AppendString(b, s)
}

// Write answers p as a JSON error response: its status, Retry-After when it
// has a hint, and the body followed by a newline.
func Write(w http.ResponseWriter, p *apierr.Problem) {
	if s := p.RetryAfterSeconds(); s > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	b := Append(make([]byte, 0, 96+len(p.Message)+len(p.Param)), p)
	httpx.WriteJSON(w, p.Status, append(b, '\n'))
}
