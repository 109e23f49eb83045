// Package apierr owns the one classification of every error a public API
// request can end in: a domain error from the router (internal/chat), a
// caller's mistake found while decoding, a body over its cap or late, a
// context that ended, or anything unexpected. Classify turns each into a
// Problem: what class of failure it is, the HTTP status, a retry hint, the
// OpenAI-style code and a message that is safe to show. The protocol
// packages only translate a Problem into their wire shapes, so the three
// protocols agree on every status. docs/protocol-errors.md has the table.
package apierr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// Class is what a failure means to the caller; each protocol names it its own
// way.
type Class uint8

// Classes of failure, each with one HTTP status (Anthropic answers
// Unavailable with its own 529).
const (
	Internal         Class = iota // 500: unexpected, no details shown
	InvalidRequest                // 400: the caller's mistake
	Unauthorized                  // 401
	NotFound                      // 404
	MethodNotAllowed              // 405
	RequestTimeout                // 408: the body did not arrive in time
	Conflict                      // 409
	TooLarge                      // 413: the body is over its cap
	RateLimited                   // 429: the gateway's admission or the upstream's quota
	Canceled                      // 499: the client closed the request
	Upstream                      // 502: the worker failed or went away
	Unavailable                   // 503: no instance can serve now
	Timeout                       // 504: the request's deadline passed
)

// StatusClientClosed is the status of a request whose client went away
// (nginx's 499): nobody reads it, but logs and metrics tell it apart.
const StatusClientClosed = 499

var statuses = [...]int{
	Internal:         http.StatusInternalServerError,
	InvalidRequest:   http.StatusBadRequest,
	Unauthorized:     http.StatusUnauthorized,
	NotFound:         http.StatusNotFound,
	MethodNotAllowed: http.StatusMethodNotAllowed,
	RequestTimeout:   http.StatusRequestTimeout,
	Conflict:         http.StatusConflict,
	TooLarge:         http.StatusRequestEntityTooLarge,
	RateLimited:      http.StatusTooManyRequests,
	Canceled:         StatusClientClosed,
	Upstream:         http.StatusBadGateway,
	Unavailable:      http.StatusServiceUnavailable,
	Timeout:          http.StatusGatewayTimeout,
}

// Status is the class's HTTP status.
func (k Class) Status() int { return statuses[k] }

// Problem is a classified error: what the client is told.
type Problem struct {
	Class Class
	// Status is the HTTP status; Class.Status() except for an error that
	// carries its own (a generic error written by status).
	Status int
	// Code is the machine-readable reason OpenAI's shape carries in "code"
	// ("" is null).
	Code string
	// Param names the request field at fault, in the protocol's terms
	// ("" when none or the whole body). A *chat.ValidationError's neutral
	// path is here until the protocol translates it.
	Param string
	// Message is safe to show: never the text of an unexpected error.
	Message string
	// RetryAfter, when positive, goes out as a Retry-After header.
	RetryAfter time.Duration
	// Err is the error classified, for logs.
	Err error
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up; 0 when no
// hint is sent.
func (p *Problem) RetryAfterSeconds() int {
	if p.RetryAfter <= 0 {
		return 0
	}
	return int((p.RetryAfter + time.Second - 1) / time.Second)
}

// RequestError is a caller's mistake found while decoding a request, named
// in the protocol's own terms. Classify makes it a 400 (or its Status).
type RequestError struct {
	// Status is 0 for 400; 404 for an id that names nothing.
	Status int
	// Param is the field at fault ("" when the whole body is).
	Param string
	// Code is OpenAI's reason code ("" for none).
	Code    string
	Message string
}

func (e *RequestError) Error() string { return e.Message }

// BadRequest is a client error found while decoding: a 400 whose message,
// formatted as fmt.Sprintf does, starts with the field at fault.
func BadRequest(format string, args ...any) error {
	return &RequestError{Message: fmt.Sprintf(format, args...)}
}

// Codes of request errors, as OpenAI names them.
const (
	CodeInvalidType = "invalid_type"
	CodeInvalidJSON = "invalid_json"
	CodeInvalid     = "invalid_value"
	CodeMissing     = "missing_required_parameter"
	CodeUnsupported = "unsupported_parameter"
	CodeUnsupValue  = "unsupported_value"
)

// ValidationCode is the OpenAI code of a neutral validation problem.
func ValidationCode(p chat.ValidationProblem) string {
	if p == chat.Missing {
		return CodeMissing
	}
	return CodeInvalid
}

// Classify maps any error to the Problem the client is told. It is the
// gateway's one mapper from errors to statuses; see docs/protocol-errors.md.
func Classify(err error) Problem {
	var (
		re  *RequestError
		ve  *chat.ValidationError
		pe  *chat.PolicyError
		ole *chat.OverloadedError
		rle *chat.RateLimitedError
		ue  *chat.UpstreamError
		tle *chat.TooLargeError
		ume *chat.UnknownModelError
	)
	p := Problem{Err: err}
	switch {
	case errors.As(err, &re):
		p.Class, p.Param, p.Code, p.Message = InvalidRequest, re.Param, re.Code, re.Message
		if re.Status == http.StatusNotFound {
			p.Class = NotFound
		}
	case errors.As(err, &ve):
		p.Class, p.Param, p.Code, p.Message = InvalidRequest, ve.Path(), ValidationCode(ve.Problem), ve.Error()
	case errors.As(err, &pe):
		p.Class, p.Param, p.Code, p.Message = InvalidRequest, pe.Param, "tool_not_allowed", pe.Message
	case errors.As(err, &ume):
		p.Class, p.Param, p.Code, p.Message = NotFound, "model", "model_not_found", ume.Error()
	case errors.As(err, &tle):
		p.Class, p.Code, p.Message = TooLarge, "request_too_large", tle.Error()
	case errors.Is(err, httpx.ErrBodyTooLarge):
		p.Class, p.Code, p.Message = TooLarge, "request_too_large", "request body too large"
	case errors.Is(err, httpx.ErrBudget):
		p.Class, p.Code, p.Message, p.RetryAfter = RateLimited, "overloaded", "the gateway is at capacity, retry later", time.Second
	case errors.Is(err, httpx.ErrBodyTimeout):
		p.Class, p.Code, p.Message = RequestTimeout, "request_timeout", httpx.ErrBodyTimeout.Error()
	case errors.Is(err, httpx.ErrTooManyConns):
		p.Class, p.Code, p.Message, p.RetryAfter = RateLimited, "too_many_connections", httpx.ErrTooManyConns.Error(), time.Second
	case errors.Is(err, httpx.ErrTooDeep):
		p.Class, p.Code, p.Message = InvalidRequest, CodeInvalidJSON, httpx.ErrTooDeep.Error()
	case errors.As(err, &ole):
		p.Class, p.Code, p.Message = RateLimited, "overloaded", "the gateway is at capacity, retry later"
		p.RetryAfter = max(ole.RetryAfter, time.Second)
	case errors.As(err, &rle):
		p.Class, p.Code, p.Message = RateLimited, "rate_limit_exceeded", "upstream rate limit"
		if rle.Message != "" {
			p.Message += ": " + rle.Message
		}
		p.RetryAfter = rle.RetryAfter
	case errors.Is(err, chat.ErrNotLoggedIn): // before ErrNoInstance: a pool with every account logged out is both
		p.Class, p.Code, p.Message = Unavailable, "not_logged_in", "the backend account is not logged in"
	case errors.Is(err, chat.ErrNoInstance):
		p.Class, p.Code, p.Message = Unavailable, "no_instance", "no backend instance is ready to serve"
	case errors.As(err, &ue):
		p.Class, p.Code, p.Message = Upstream, "upstream_error", ue.Error()
	case errors.Is(err, chat.ErrWorkerGone):
		p.Class, p.Code, p.Message = Upstream, "worker_gone", "the backend worker went away"
	case errors.Is(err, context.DeadlineExceeded):
		p.Class, p.Code, p.Message = Timeout, "timeout", "the request timed out"
	case errors.Is(err, context.Canceled):
		p.Class, p.Code, p.Message = Canceled, "canceled", "the client closed the request"
	default:
		// No details: an unexpected error may carry internals.
		p.Class, p.Message = Internal, "internal error"
	}
	p.Status = p.Class.Status()
	return p
}

// ForStatus is the Problem of an error the HTTP layer answers by status
// (authentication, unknown routes, body caps, a panic): message is shown as
// it is. A status without a class of its own keeps its number with
// Internal's names.
func ForStatus(status int, message string) Problem {
	p := Problem{Class: Internal, Status: status, Message: message}
	for k, s := range statuses {
		if s == status {
			p.Class = Class(k)
			break
		}
	}
	switch p.Class {
	case TooLarge:
		p.Code = "request_too_large"
	case RequestTimeout:
		p.Code = "request_timeout"
	}
	return p
}

// Gone reports whether the client of ctx went away, so nobody reads an
// answer. A body that did not arrive in time ends the request too, but its
// client still waits for the 408; a deadline still gets its 504.
func Gone(ctx context.Context, err error) bool {
	return errors.Is(ctx.Err(), context.Canceled) && !errors.Is(err, httpx.ErrBodyTimeout)
}

// Validate runs req.Validate and reports a failure as a RequestError naming
// the field with param, the protocol's name for a neutral field path.
func Validate(req *chat.Request, param func(*chat.ValidationError) string) error {
	err := req.Validate()
	if err == nil {
		return nil
	}
	var ve *chat.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	name := param(ve)
	return &RequestError{Param: name, Code: ValidationCode(ve.Problem), Message: name + ": " + ve.Message}
}
