package httpx

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Every connection has a deadline, on every listener, before anything
// decides who is calling: the server's ReadHeaderTimeout bounds the
// headers, Deadlines the body, and the server's IdleTimeout the wait for
// the next request. Without the body's, a refusal written before the body
// was read (a missing key, say) waits for it: net/http reads what is left
// of an unread body, up to 256 KiB, before it writes the answer and again
// before it reuses the connection, with no deadline of its own, so a client
// that announced a body and never sent it held the connection forever.

// Deadlines serves h with a read deadline of timeout on every request body:
// from the moment the headers are read, before any middleware runs. The
// deadline is lifted once the body has been read to its end (a long stream
// must not be cut by it). An answer that starts before its body was read
// closes the connection, at once: the server neither waits for the rest of
// the body nor reads another request from a connection whose unread bytes
// are on the wire (closeUnread). A request the body is late for gets its
// handler's answer to the read error (408 from the body readers here) in
// time.
func Deadlines(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if rc.SetReadDeadline(time.Now().Add(timeout)) != nil {
			h.ServeHTTP(w, r) // not a connection of net/http's (a test's recorder)
			return
		}
		b := &bodyWatch{ResponseWriter: w, body: r.Body, rc: rc}
		r.Body = b
		h.ServeHTTP(b, r)
		if !b.done {
			_ = rc.SetReadDeadline(time.Now()) // after the answer: no wait for the rest
		}
	})
}

// bodyWatch is one request's body and response writer: it lifts the read
// deadline at the body's end, and closes the connection when an answer
// starts before the body was read.
type bodyWatch struct {
	http.ResponseWriter
	body    io.ReadCloser
	rc      *http.ResponseController
	done    bool // the body was read to its end
	started bool // the answer's header is written
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

func (b *bodyWatch) Close() error { return b.body.Close() }

// start runs before the answer's header goes out.
func (b *bodyWatch) start() {
	if b.started {
		return
	}
	b.started = true
	if !b.done {
		closeUnread(b.ResponseWriter)
	}
}

func (b *bodyWatch) WriteHeader(code int) {
	if code >= 200 { // a 1xx answer is not the answer
		b.start()
	}
	b.ResponseWriter.WriteHeader(code)
}

func (b *bodyWatch) Write(p []byte) (int, error) {
	b.start()
	return b.ResponseWriter.Write(p)
}

// Flush keeps streaming working through the wrapper (gin asserts
// http.Flusher).
func (b *bodyWatch) Flush() {
	b.start()
	_ = http.NewResponseController(b.ResponseWriter).Flush()
}

// Hijack hands the connection over, as the writer it wraps would.
func (b *bodyWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(b.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (b *bodyWatch) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// closeUnread makes the answer about to be written on w (the server's own
// writer) the connection's last, and ends any wait for the unread body: the
// server reads nothing more from the client. It closes the connection as
// net/http closes one whose body went over its limit, which is what it
// tells w: gracefully, a FIN after the answer and a pause before the close,
// so the client reads the answer before the unread bytes it keeps sending
// make the close a reset.
func closeUnread(w http.ResponseWriter) {
	over := http.MaxBytesReader(w, io.NopCloser(strings.NewReader(" ")), 0)
	_, _ = over.Read(make([]byte, 1)) // a byte past a limit of none
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now()) // best effort: a recorder has no connection
}
