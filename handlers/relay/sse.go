package relay

import (
	"net/http"
	"time"
)

// EventWriter is what a protocol's stream encoder writes with: named events
// (the name may be empty) and comments. *SSE is the one implementation
// outside tests.
type EventWriter interface {
	Event(name string, data []byte) error
	Comment(text string) error
}

// SSE writes one server-sent-event stream on a plain http.ResponseWriter.
// Protocols supply event names and payloads; SSE does the headers, framing,
// flushing and the stream's write deadline. It is not safe for concurrent use.
type SSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	buf     []byte
	// hold keeps writes in the response's buffer, unflushed, while the
	// relay has more events at hand.
	hold bool
	// WriteTimeout bounds each write+flush (default 30s); a client that stops
	// reading can't pin a goroutine forever.
	WriteTimeout time.Duration
	// contentType replaces the event stream's, for a protocol that streams
	// in a framing of its own through Raw ("" for server-sent events).
	contentType string
}

// newSSE returns a writer for w. Nothing is sent until the first event, so a
// failure before it can still be answered with a JSON error and its status.
func newSSE(w http.ResponseWriter) *SSE {
	return &SSE{w: w, rc: http.NewResponseController(w), WriteTimeout: 30 * time.Second}
}

// Started reports whether headers (and so at least one event) were sent.
func (s *SSE) Started() bool { return s.started }

func (s *SSE) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	if s.contentType != "" {
		h.Set("Content-Type", s.contentType)
	} else {
		h.Set("Content-Type", "text/event-stream; charset=utf-8")
	}
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: pass the stream through unbuffered
	s.w.WriteHeader(http.StatusOK)
}

// Event writes one event. name may be empty (OpenAI chat sends data-only
// events). data is the JSON payload, written as a single data line.
func (s *SSE) Event(name string, data []byte) error {
	s.start()
	b := s.buf[:0]
	if name != "" {
		b = append(b, "event: "...)
		b = append(b, name...)
		b = append(b, '\n')
	}
	b = append(b, "data: "...)
	b = append(b, data...)
	b = append(b, '\n', '\n')
	s.buf = b
	return s.write(b)
}

// Raw writes b as it is: the frames of a stream that is not server-sent
// events (Gemini's JSON array), with the same headers, flushing and
// deadlines.
func (s *SSE) Raw(b []byte) error {
	s.start()
	return s.write(b)
}

// Comment writes a keep-alive comment line.
func (s *SSE) Comment(text string) error {
	s.start()
	return s.write([]byte(": " + text + "\n\n"))
}

// Hold says whether the next writes may stay buffered: the relay holds
// them while more events are already waiting, so that a burst goes out in
// one write. The first write after Hold(false) flushes them all.
func (s *SSE) Hold(hold bool) { s.hold = hold }

func (s *SSE) write(b []byte) error {
	if s.hold {
		// Under the deadline of the last flush, a moment ago: a held write
		// reaches the connection only when the buffer fills.
		_, err := s.w.Write(b)
		return err
	}
	if s.WriteTimeout > 0 {
		// Not every ResponseWriter supports deadlines (httptest's doesn't);
		// that is fine, the deadline is a safety net.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
	}
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
