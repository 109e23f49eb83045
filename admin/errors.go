package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/gin-gonic/gin"
)

// Every failed admin call answers, whatever protocol the public API speaks,
// with its HTTP status and one JSON shape:
//
//	{"error": {"code": "unknown_instance", "message": "unknown instance sim-9"}}
//
// The code is one of the Code* words: stable, for scripts to branch on. The
// message is for people and may change.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is one admin error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error codes, with the status each comes with.
const (
	CodeBadRequest      = "bad_request"      // 400: a parameter or the body is missing or wrong
	CodeUnauthorized    = "unauthorized"     // 401: no or a wrong credential
	CodeForbidden       = "forbidden"        // 403: the caller's role may not, or the operator turned this off (plain bundle imports)
	CodeUnknownInstance = "unknown_instance" // 404: no instance has that name
	CodeNotFound        = "not_found"        // 404: the instance has no such thing (a login screenshot)
	CodeBodyTimeout     = "body_timeout"     // 408: the body did not arrive in time
	CodeBusy            = "instance_busy"    // 409: the instance can't take this now (a probe)
	CodeNotRunning      = "not_running"      // 409 or 503: the instance's worker is not running
	CodeNotLoggedIn     = "not_logged_in"    // 409: the instance has no credentials to export
	CodeWrongAccount    = "wrong_account"    // 409: the bundle is another account's
	CodeNotLeaseHolder  = "not_lease_holder" // 409: another replica drives the instance (clustered)
	CodeBodyTooLarge    = "body_too_large"   // 413
	CodeBundleRejected  = "bundle_rejected"  // 422: the bundle's seal or checksum does not verify
	CodeConfigInvalid   = "config_invalid"   // 422: a reload found the configuration invalid; the old one stays
	CodeWorkerError     = "worker_error"     // 502: the instance's worker failed the request
	CodeUnavailable     = "unavailable"      // 503: the feature is off (no bundle key, no browser)
	CodeInternal        = "internal"         // 500
)

// writeError answers the request with an admin error.
func writeError(c *gin.Context, status int, code, message string) {
	WriteError(c.Writer, status, code, message)
}

// abortWith answers with an admin error and stops the handler chain.
func abortWith(c *gin.Context, status int, code, message string) {
	writeError(c, status, code, message)
	c.Abort()
}

// WriteError writes an admin error to w: for the HTTP edge's refusals on
// the admin surface, and plain net/http callbacks (a reverse proxy's error
// handler).
func WriteError(w http.ResponseWriter, status int, code, message string) {
	b, _ := json.Marshal(ErrorBody{Error: Error{Code: code, Message: message}}) // two strings: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// bodyLimit caps admin request bodies in size: over max is a 413 at once
// (or when reading finds it). How long a body may take is bounded before
// any middleware runs (httpx.Deadlines, which the daemon wraps every listener in).
func bodyLimit(capOf func(*gin.Context) int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		r, max := c.Request, capOf(c)
		if r.ContentLength > max {
			abortWith(c, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body over "+strconv.FormatInt(max, 10)+" bytes")
			return
		}
		r.Body = http.MaxBytesReader(c.Writer, r.Body, max)
		c.Next()
	}
}

// readBody reads the request body under bodyLimit's caps, or answers the
// error (413, 408, 400) and reports false.
func readBody(c *gin.Context, tooLarge string) ([]byte, bool) {
	b, err := io.ReadAll(c.Request.Body)
	if err != nil {
		writeBodyError(c, err, tooLarge)
		return nil, false
	}
	return b, true
}

// writeBodyError answers a body that could not be read under bodyLimit's
// caps: 413, 408 or 400.
func writeBodyError(c *gin.Context, err error, tooLarge string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(c, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, tooLarge)
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(c, http.StatusRequestTimeout, CodeBodyTimeout, "the request body did not arrive in time")
	default:
		writeError(c, http.StatusBadRequest, CodeBadRequest, "read body: "+err.Error())
	}
}
