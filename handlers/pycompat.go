package handlers

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/pycompat"
)

// PythonErrors is python_compat's error shape at the edge: every JSON error
// body in OpenAI's or the admin API's shape ({"error": ...}) gets the Python
// gateway's {"detail": {"error": ...}} beside it, whoever wrote it (a
// protocol, the authorization, the admin API, a recovered panic, a hop's
// copy). FastAPI answered every error of that gateway's routes under
// "detail", and its scripts read it there; OpenAI's SDKs read "error".
// Anthropic's shape, which that gateway kept on its Messages routes, passes
// as it is. Only a response whose status is 400 or more and whose
// Content-Type is JSON is held, then rewritten; anything else, a stream
// above all, passes through untouched.
func PythonErrors() gin.HandlerFunc {
	return func(c *gin.Context) {
		w := &detailWriter{ResponseWriter: c.Writer}
		c.Writer = w
		defer func() {
			c.Writer = w.ResponseWriter
			w.release()
		}()
		c.Next()
	}
}

// detailWriter holds an error body until the request is over.
type detailWriter struct {
	gin.ResponseWriter
	status int
	held   *bytes.Buffer // nil: not holding
}

func (w *detailWriter) WriteHeader(code int) {
	if code >= 400 && w.held == nil && !w.ResponseWriter.Written() &&
		strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.status, w.held = code, new(bytes.Buffer)
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *detailWriter) WriteHeaderNow() {
	if w.held == nil {
		w.ResponseWriter.WriteHeaderNow()
	}
}

func (w *detailWriter) Write(b []byte) (int, error) {
	if w.held != nil {
		return w.held.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *detailWriter) WriteString(s string) (int, error) {
	if w.held != nil {
		return w.held.WriteString(s)
	}
	return w.ResponseWriter.WriteString(s)
}

func (w *detailWriter) Status() int {
	if w.held != nil {
		return w.status
	}
	return w.ResponseWriter.Status()
}

func (w *detailWriter) Written() bool { return w.held != nil || w.ResponseWriter.Written() }

func (w *detailWriter) Flush() {
	if w.held == nil {
		w.ResponseWriter.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *detailWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// release writes the held error body, with its detail.
func (w *detailWriter) release() {
	if w.held == nil {
		return
	}
	body := pycompat.WithDetail(w.held.Bytes())
	w.held = nil
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body) // the client may be gone
}
