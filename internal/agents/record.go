package agents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
)

// Exchange is one request a client sent, as recorded, with the status the
// gateway answered.
type Exchange struct {
	Client   string          `json:"client"`
	Version  string          `json:"version"`
	Scenario string          `json:"scenario"`
	Method   string          `json:"method"`
	Path     string          `json:"path"` // with the query string
	Header   http.Header     `json:"header"`
	Body     json.RawMessage `json:"body"`
	Status   int             `json:"status"`
}

// secretHeaders are never recorded.
var secretHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Cookie", "Proxy-Authorization"}

// hopHeaders say nothing about the client and change with every run.
var hopHeaders = []string{"Content-Length", "Connection", "Accept-Encoding", "Host"}

// Recorder is a reverse proxy in front of a gateway that keeps every request
// passing through it (credentials removed) with the answer's status.
type Recorder struct {
	proxy *httputil.ReverseProxy

	mu       sync.Mutex
	client   Client
	scenario string
	log      []Exchange
}

// NewRecorder returns a recorder forwarding to target.
func NewRecorder(target string) (*Recorder, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	r := &Recorder{proxy: httputil.NewSingleHostReverseProxy(u)}
	r.proxy.FlushInterval = -1 // stream answers through as they come
	return r, nil
}

// Scenario labels the requests that follow.
func (r *Recorder) Scenario(c Client, scenario string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.client, r.scenario = c, scenario
}

// ServeHTTP records the request and forwards it.
func (r *Recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	h := req.Header.Clone()
	for _, k := range append(secretHeaders, hopHeaders...) {
		h.Del(k)
	}
	ex := Exchange{Method: req.Method, Path: withoutKey(req.URL), Header: h}
	if json.Valid(body) {
		ex.Body = body
	}
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	r.proxy.ServeHTTP(sw, req)
	ex.Status = sw.status
	r.mu.Lock()
	ex.Client, ex.Version, ex.Scenario = r.client.Name, r.client.Version, r.scenario
	r.log = append(r.log, ex)
	r.mu.Unlock()
}

// withoutKey is u's path and query without a key parameter (Gemini
// clients may send their key there).
func withoutKey(u *url.URL) string {
	q := u.Query()
	if !q.Has("key") {
		return u.RequestURI()
	}
	q.Del("key")
	c := *u
	c.RawQuery = q.Encode()
	return c.RequestURI()
}

// Exchanges returns what was recorded so far.
func (r *Recorder) Exchanges() []Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Exchange(nil), r.log...)
}

// statusWriter remembers the status a handler answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Flush keeps streaming through the wrapper.
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// WriteFixtures replaces dir/<client>/ with the client's recorded requests,
// one indented JSON file each (NN-scenario.json), so a release's changes
// show as a readable diff.
func WriteFixtures(dir string, c Client, exs []Exchange) error {
	sub := filepath.Join(dir, c.Name)
	if err := os.RemoveAll(sub); err != nil {
		return err
	}
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return err
	}
	n := 0
	for _, ex := range exs {
		if ex.Client != c.Name {
			continue
		}
		n++
		b, err := json.MarshalIndent(ex, "", "  ")
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%02d-%s.json", n, ex.Scenario)
		if err := os.WriteFile(filepath.Join(sub, name), append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
