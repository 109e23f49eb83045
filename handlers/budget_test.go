package handlers

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/relay"
)

// TestBodyBudget: a body the gateway-wide budget has no room for gets 429
// with Retry-After in its protocol: at once when its length is announced,
// as it arrives when it is sent chunked; a body that fits is served; and
// every request gives its room back.
func TestBodyBudget(t *testing.T) {
	gin.SetMode(gin.TestMode)
	budget := httpx.NewBudget(int64(len(chatBody))+10, 0, nil, nil)
	log := slog.New(slog.DiscardHandler)
	e := New(Config{MaxBodyBytes: 1 << 20, BodyBudget: budget, Insecure: true, Router: &fakeRouter{}},
		[]relay.Protocol{openaichat.New(openaichat.Config{}, log)}, nil, log)
	padded := chatBody[:len(chatBody)-1] + `,"user":"` + strings.Repeat("x", 100) + `"}`
	tests := []struct {
		name    string
		give    string
		chunked bool
		want    int
	}{
		{"fits", chatBody, false, 200},
		{"announced, too large for the budget", padded, false, 429},
		{"chunked, fits", chatBody, true, 200},
		{"chunked, too large for the budget", strings.Repeat(" ", 200<<10) + chatBody, true, 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tt.give)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length
			}
			r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", body)
			if tt.chunked {
				r.ContentLength = -1
			}
			r.Header.Set("Content-Type", "application/json") // as the keyless gateway's browser guard asks
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("status %d (%s), want %d", w.Code, w.Body, tt.want)
			}
			if tt.want == 429 && (w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), `"code":"overloaded"`)) {
				t.Errorf("refusal %s (Retry-After %q), want OpenAI's overloaded error with Retry-After", w.Body, w.Header().Get("Retry-After"))
			}
			if budget.Held() != 0 {
				t.Errorf("%d bytes still held after the request", budget.Held())
			}
		})
	}
}
