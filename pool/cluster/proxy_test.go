package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/access"
)

// holder is a stand-in for the replica a hop goes to: it records what it
// was sent and answers in two flushed pieces.
type holder struct {
	method, uri, by, token, id, body, te string
	length                               int64
}

func (h *holder) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.method, h.uri, h.body, h.length = r.Method, r.URL.RequestURI(), string(b), r.ContentLength
	h.by, h.token, h.id = r.Header.Get(access.HopHeader), r.Header.Get(access.TokenHeader), r.Header.Get("X-Request-Id")
	h.te = strings.Join(r.TransferEncoding, ",")
	w.Header().Set("X-Request-Id", "the holder's own")
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "data: one\n\n")
	w.(http.Flusher).Flush()
	_, _ = io.WriteString(w, "data: two\n\n")
}

func TestProxyForward(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		body     string
		bodyless bool // the client sent no body at all
		wantLen  int64
	}{
		{name: "an API turn's body", method: http.MethodPost, body: `{"model":"m"}`, wantLen: 13},
		{name: "an admin action without a body", method: http.MethodPost, bodyless: true, wantLen: 0},
		{name: "a read", method: http.MethodGet, bodyless: true, wantLen: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &holder{}
			srv := httptest.NewServer(http.HandlerFunc(h.serve))
			defer srv.Close()
			var in io.Reader = strings.NewReader(tt.body)
			if tt.bodyless {
				in = nil
			}
			r := httptest.NewRequest(tt.method, "/v1/chat/completions?x=1", in)
			r.Header.Set("Authorization", "Bearer sk-user")
			r.Header.Set("Connection", "close") // hop-by-hop: not carried
			rec := httptest.NewRecorder()
			rec.Header().Set("X-Request-Id", "req_1")
			p := &Proxy{From: "r1", Token: "ct"}
			// The server hands a handler its body wrapped (caps, deadlines):
			// not http.NoBody even when there is none.
			var body io.Reader = struct{ io.Reader }{r.Body}
			if !tt.bodyless {
				body = bytes.NewReader([]byte(tt.body))
			}
			if err := p.Forward(context.Background(), rec, r, body, srv.URL+"/"); err != nil {
				t.Fatal(err)
			}
			if h.method != tt.method || h.uri != "/v1/chat/completions?x=1" || h.body != tt.body || h.length != tt.wantLen || h.te != "" {
				t.Errorf("holder got %s %s %q (length %d, transfer-encoding %q), want %s with %q of length %d",
					h.method, h.uri, h.body, h.length, h.te, tt.method, tt.body, tt.wantLen)
			}
			if h.by != "r1" || h.token != "ct" || h.id != "req_1" {
				t.Errorf("hop headers: by %q token %q id %q", h.by, h.token, h.id)
			}
			if rec.Code != http.StatusAccepted || rec.Body.String() != "data: one\n\ndata: two\n\n" ||
				rec.Header().Get("X-Request-Id") != "req_1" || rec.Header().Get("Content-Type") != "text/event-stream" {
				t.Errorf("client got %d %q %v", rec.Code, rec.Body, rec.Header())
			}
		})
	}
}

// A replica that cannot be reached is an error with nothing written, so the
// caller can still answer.
func TestProxyUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rec := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
	err := (&Proxy{From: "r1", Token: "ct"}).Forward(context.Background(), rec, r, strings.NewReader("{}"), url)
	if err == nil || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("got %v, %d bytes, headers %v; want an error and nothing written", err, rec.Body.Len(), rec.Header())
	}
}
