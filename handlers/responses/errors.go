package responses

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/session"
)

// requestError is a client mistake; it becomes a 4xx naming the parameter.
type requestError struct {
	status int // 0 means 400
	param  string
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badParam(param, msg string) error {
	return &requestError{param: param, msg: msg}
}

// notFound is the 404 for an unknown or deleted response id.
func notFound(param, id string) error {
	return &requestError{status: http.StatusNotFound, param: param,
		msg: "Response with id '" + id + "' not found."}
}

// wireError is one error as the OpenAI shape reports it.
type wireError struct {
	status     int
	typ        string
	msg        string
	param      string // "" is JSON null
	code       string // "" is JSON null
	retryAfter time.Duration
}

// mapError is this protocol's one mapper from domain errors to the wire
// (STYLE 11), with the same statuses and codes as the chat completions
// handler's (openaichat.ErrorFor). It is used for JSON answers and, through failCode, for the
// error object of a response.failed event.
func mapError(err error) wireError {
	var (
		reqErr *requestError
		over   *chat.OverloadedError
		rate   *chat.RateLimitedError
		up     *chat.UpstreamError
		policy *chat.PolicyError
	)
	switch {
	case errors.As(err, &policy):
		return wireError{status: http.StatusBadRequest, typ: "invalid_request_error", msg: policy.Message, param: policy.Param,
			code: "tool_not_allowed"}
	case errors.As(err, &reqErr):
		status := reqErr.status
		if status == 0 {
			status = http.StatusBadRequest
		}
		return wireError{status: status, typ: "invalid_request_error", msg: reqErr.msg, param: reqErr.param, code: reqErr.code}
	case errors.Is(err, httpx.ErrBodyTooLarge):
		return wireError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "request_too_large", msg: "request body too large"}
	case errors.Is(err, httpx.ErrBodyTimeout):
		return wireError{status: http.StatusRequestTimeout, typ: "invalid_request_error", code: "request_timeout", msg: err.Error()}
	case errors.As(err, &over):
		return wireError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "overloaded",
			msg: "the gateway is at capacity, retry later", retryAfter: max(over.RetryAfter, time.Second)}
	case errors.As(err, &rate):
		return wireError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: "rate_limit_exceeded",
			msg: "upstream rate limit: " + rate.Message, retryAfter: rate.RetryAfter}
	case errors.Is(err, chat.ErrNoInstance):
		return wireError{status: http.StatusServiceUnavailable, typ: "server_error", code: "no_instance",
			msg: "no backend instance is ready to serve"}
	case errors.Is(err, chat.ErrNotLoggedIn):
		return wireError{status: http.StatusServiceUnavailable, typ: "server_error", code: "not_logged_in",
			msg: "the backend account is not logged in"}
	case errors.As(err, &up), errors.Is(err, chat.ErrWorkerGone):
		return wireError{status: http.StatusBadGateway, typ: "server_error", code: "upstream_error", msg: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return wireError{status: http.StatusGatewayTimeout, typ: "server_error", code: "timeout", msg: "the request timed out"}
	default:
		// No details: an unexpected error may carry internals.
		return wireError{status: http.StatusInternalServerError, typ: "server_error", code: "server_error", msg: "internal error"}
	}
}

// failCode is the error.code of a response.failed object.
func failCode(we wireError) string {
	if we.status == http.StatusTooManyRequests {
		return "rate_limit_exceeded"
	}
	return "server_error"
}

// writeMapped answers err as an OpenAI error body with its status.
func writeMapped(w http.ResponseWriter, err error) {
	we := mapError(err)
	if we.retryAfter > 0 {
		secs := int((we.retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeError(w, we)
}

// writeError writes {"error":{"message","type","param","code"}}, all four keys
// present (absent ones null), as OpenAI's SDKs expect.
func writeError(w http.ResponseWriter, we wireError) {
	b := make([]byte, 0, 96+len(we.msg))
	b = append(b, `{"error":{"message":`...)
	b = jsonx.AppendString(b, we.msg)
	b = append(b, `,"type":`...)
	b = jsonx.AppendString(b, we.typ)
	b = append(b, `,"param":`...)
	b = appendNullable(b, we.param)
	b = append(b, `,"code":`...)
	b = appendNullable(b, we.code)
	b = append(b, "}}"...)
	writeJSON(w, we.status, b)
}

func appendNullable(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonx.AppendString(b, s)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b) // a failed write means the client left
}

// isNotFound reports whether a store error means the id does not exist.
func isNotFound(err error) bool { return errors.Is(err, session.ErrNotFound) }
