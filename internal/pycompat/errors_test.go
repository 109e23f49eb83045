package pycompat

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// writeJSON answers a complete JSON body, as the edge does.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// Errors adds the Python gateway's detail to every JSON error body in
// OpenAI's or the admin API's shape, a panic's answer included, and leaves
// Anthropic's shape, successes and streams as they are. The handlers stand
// in for the edge's (its recovery and its unknown route write these
// bodies).
func TestErrors(t *testing.T) {
	jsonAt := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, status, body) }
	}
	mux := http.NewServeMux()
	mux.Handle("GET /openai", jsonAt(401, `{"error":{"message":"m","type":"authentication_error","param":null,"code":"not_logged_in"}}`))
	mux.Handle("GET /admin", jsonAt(404, `{"error":{"code":"unknown_instance","message":"unknown instance x"}}`))
	mux.Handle("GET /anthropic", jsonAt(401, `{"type":"error","error":{"type":"authentication_error","message":"m"}}`))
	mux.Handle("GET /ok", jsonAt(200, `{"error":null}`))
	mux.HandleFunc("GET /panic", func(w http.ResponseWriter, _ *http.Request) {
		defer func() {
			if recover() != nil { // as the edge's recovery answers a panic
				writeJSON(w, 500, `{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}`+"\n")
			}
		}()
		panic("boom")
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
		http.NewResponseController(w).Flush()
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { // the edge's unknown route
		writeJSON(w, 404, `{"error":{"message":"unknown route `+r.Method+" "+r.URL.Path+`","type":"not_found_error","param":null,"code":null}}`)
	})
	srv := httptest.NewServer(Errors(mux))
	defer srv.Close()
	tests := []struct {
		path     string
		wantCode int
		wantBody string
	}{
		{"/openai", 401, `{"error":{"message":"m","type":"authentication_error","param":null,"code":"not_logged_in"},"detail":{"error":{"message":"m","type":"authentication_error","param":null,"code":"not_logged_in"}}}`},
		{"/admin", 404, `{"error":{"code":"unknown_instance","message":"unknown instance x"},"detail":{"error":{"code":"unknown_instance","message":"unknown instance x"}}}`},
		{"/anthropic", 401, `{"type":"error","error":{"type":"authentication_error","message":"m"}}`},
		{"/ok", 200, `{"error":null}`},
		{"/panic", 500, `"detail":{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}}`},
		{"/stream", 200, "data: [DONE]\n\n"},
		{"/nowhere", 404, `"detail":{"error":{"message":"unknown route GET /nowhere"`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.wantCode || !strings.Contains(string(b), tt.wantBody) {
				t.Errorf("got %d %s, want %d containing %s", res.StatusCode, b, tt.wantCode, tt.wantBody)
			}
			if cl := res.Header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(b)) {
				t.Errorf("Content-Length %s, body %d bytes", cl, len(b))
			}
		})
	}
}
