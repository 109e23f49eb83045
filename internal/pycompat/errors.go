package pycompat

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
)

// Errors is python_compat's error shape at the edge: every JSON error body
// in OpenAI's or the admin API's shape ({"error": ...}) gets the Python
// gateway's {"detail": {"error": ...}} beside it, whoever wrote it (a
// protocol, the authorization, the admin API, a recovered panic, a hop's
// copy). FastAPI answered every error of that gateway's routes under
// "detail", and its scripts read it there; OpenAI's SDKs read "error".
// Anthropic's shape, which that gateway kept on its Messages routes, passes
// as it is. Only a response whose status is 400 or more and whose
// Content-Type is JSON is held, then rewritten; anything else, a stream
// above all, passes through untouched. The wiring wraps each listener's
// handler in it, outside everything that writes.
func Errors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dw := &detailWriter{ResponseWriter: w}
		defer dw.release()
		next.ServeHTTP(dw, r)
	})
}

// detailWriter holds an error body until the request is over.
type detailWriter struct {
	http.ResponseWriter
	status int
	wrote  bool          // the status went out
	held   *bytes.Buffer // nil: not holding
}

func (w *detailWriter) WriteHeader(code int) {
	if code >= 400 && w.held == nil && !w.wrote &&
		strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		w.status, w.held = code, new(bytes.Buffer)
		return
	}
	if w.held == nil {
		w.wrote = true
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *detailWriter) Write(b []byte) (int, error) {
	if w.held != nil {
		return w.held.Write(b)
	}
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (w *detailWriter) Flush() {
	if w.held == nil {
		_ = http.NewResponseController(w.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *detailWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// release writes the held error body, with its detail.
func (w *detailWriter) release() {
	if w.held == nil {
		return
	}
	body := WithDetail(w.held.Bytes())
	w.held = nil
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body) // the client may be gone
}
