package responses

import (
	"errors"
	"net/http"

	"github.com/poolgate/poolgate/handlers/apierr"
)

// ErrNotFound is what a Store returns for a response id it does not hold.
var ErrNotFound = errors.New("response not found")

// badParam is a client mistake naming the parameter at fault: a 400.
func badParam(param, msg string) error {
	return &apierr.RequestError{Param: param, Message: msg}
}

// notFound is the 404 for an unknown or deleted response id.
func notFound(param, id string) error {
	return &apierr.RequestError{Status: http.StatusNotFound, Param: param,
		Message: "Response with id '" + id + "' not found."}
}

// failCode is the error.code of a response.failed object: OpenAI knows
// rate_limit_exceeded and server_error for a response that failed.
func failCode(p *apierr.Problem) string {
	if p.Class == apierr.RateLimited {
		return "rate_limit_exceeded"
	}
	return "server_error"
}

// isNotFound reports whether a store error means the id does not exist.
func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
