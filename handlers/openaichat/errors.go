package openaichat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// OpenAI error types used in bodies. OpenAI itself only documents
// invalid_request_error and server_error precisely; the others follow the
// names its SDKs and most compatible servers use.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
)

// APIError is one OpenAI-style error: the HTTP status, the body's fields and
// an optional Retry-After hint. ErrorFor builds one from any error.
type APIError struct {
	Status  int
	Type    string
	Message string
	// Param names the request field at fault (nil when none).
	Param *string
	// Code is a machine-readable reason (nil when none).
	Code *string
	// RetryAfter, when positive, is sent as a Retry-After header in whole
	// seconds, rounded up.
	RetryAfter time.Duration
}

// Write sends e as a JSON error response.
func (e *APIError) Write(w http.ResponseWriter) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(e.RetryAfter)))
	}
	WriteError(w, e.Status, e.Type, e.Message, e.Param, e.Code)
}

// retryAfterSeconds rounds d up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// errorBody is the wire shape {"error":{...}}; param and code are always
// present, as null when unset, the way OpenAI sends them.
type errorBody struct {
	Error errorFields `json:"error"`
}

type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// WriteError writes an OpenAI-style JSON error body
// {"error":{"message","type","param","code"}} with the given status. param
// and code may be nil (sent as null). The gin middleware uses it for the
// errors it answers itself (401, 404, 413).
func WriteError(w http.ResponseWriter, status int, typ, message string, param, code *string) {
	b, _ := json.Marshal(errorBody{errorFields{Message: message, Type: typ, Param: param, Code: code}})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// requestError is a client mistake found while decoding a request.
type requestError struct {
	param string // "" when the whole body is at fault
	code  string // "" for none
	msg   string
}

func (e *requestError) Error() string {
	if e.param == "" {
		return e.msg
	}
	return e.param + ": " + e.msg
}

// Codes of request errors.
const (
	codeInvalidType = "invalid_type"
	codeInvalidVal  = "invalid_value"
	codeMissing     = "missing_required_parameter"
	codeUnsupported = "unsupported_parameter"
	codeUnsupValue  = "unsupported_value"
)

func badRequest(param, code, format string, args ...any) error {
	return &requestError{param: param, code: code, msg: fmt.Sprintf(format, args...)}
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ErrorFor maps any error of this handler or the pool below it to the
// OpenAI error the client sees. It is the protocol's one error mapper.
//
//	request errors (bad JSON, bad fields)     400 invalid_request_error
//	*chat.PolicyError (a forced tool refused) 400 invalid_request_error
//	httpx.ErrBodyTooLarge                     413 invalid_request_error
//	httpx.ErrBodyTimeout                      408 invalid_request_error
//	chat.ErrNoInstance, chat.ErrNotLoggedIn   503 server_error
//	*chat.OverloadedError                     429 rate_limit_error + Retry-After
//	*chat.RateLimitedError                    429 rate_limit_error (+ Retry-After)
//	*chat.UpstreamError, chat.ErrWorkerGone   502 server_error
//	context.DeadlineExceeded                  504 server_error
//	context.Canceled                          499 (the client is gone)
//	anything else                             500 server_error, no details
func ErrorFor(err error) *APIError {
	var (
		re  *requestError
		ole *chat.OverloadedError
		rle *chat.RateLimitedError
		ue  *chat.UpstreamError
		pe  *chat.PolicyError
	)
	switch {
	case errors.As(err, &pe):
		return &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: pe.Message,
			Param: strPtr(pe.Param), Code: strPtr("tool_not_allowed")}
	case errors.As(err, &re):
		return &APIError{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Message: re.Error(),
			Param: strPtr(re.param), Code: strPtr(re.code)}
	case errors.Is(err, httpx.ErrBodyTooLarge):
		return &APIError{Status: http.StatusRequestEntityTooLarge, Type: TypeInvalidRequest,
			Message: "request body too large", Code: strPtr("request_too_large")}
	case errors.Is(err, httpx.ErrBodyTimeout):
		return &APIError{Status: http.StatusRequestTimeout, Type: TypeInvalidRequest,
			Message: err.Error(), Code: strPtr("request_timeout")}
	case errors.As(err, &ole):
		return &APIError{Status: http.StatusTooManyRequests, Type: TypeRateLimit,
			Message: "the gateway is at capacity, retry later", Code: strPtr("overloaded"),
			RetryAfter: max(ole.RetryAfter, time.Second)}
	case errors.As(err, &rle):
		return &APIError{Status: http.StatusTooManyRequests, Type: TypeRateLimit,
			Message: rle.Error(), Code: strPtr("rate_limit_exceeded"), RetryAfter: rle.RetryAfter}
	case errors.Is(err, chat.ErrNoInstance):
		return &APIError{Status: http.StatusServiceUnavailable, Type: TypeServer,
			Message: "no backend instance is ready to serve", Code: strPtr("no_instance")}
	case errors.Is(err, chat.ErrNotLoggedIn):
		return &APIError{Status: http.StatusServiceUnavailable, Type: TypeServer,
			Message: "the backend account is not logged in", Code: strPtr("not_logged_in")}
	case errors.As(err, &ue):
		return &APIError{Status: http.StatusBadGateway, Type: TypeServer,
			Message: ue.Error(), Code: strPtr("upstream_error")}
	case errors.Is(err, chat.ErrWorkerGone):
		return &APIError{Status: http.StatusBadGateway, Type: TypeServer,
			Message: "the backend worker went away", Code: strPtr("worker_gone")}
	case errors.Is(err, context.DeadlineExceeded):
		return &APIError{Status: http.StatusGatewayTimeout, Type: TypeServer,
			Message: "the request timed out", Code: strPtr("timeout")}
	case errors.Is(err, context.Canceled):
		return &APIError{Status: 499, Type: TypeInvalidRequest,
			Message: "the client closed the request", Code: strPtr("canceled")}
	default:
		return &APIError{Status: http.StatusInternalServerError, Type: TypeServer,
			Message: "internal error"}
	}
}
