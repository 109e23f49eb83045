package handlers

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/httpx"
)

// PythonErrors adds the Python gateway's detail to every JSON error body in
// OpenAI's or the admin API's shape, a panic's answer included, and leaves
// Anthropic's shape, successes and streams as they are.
func TestPythonErrors(t *testing.T) {
	gin.SetMode(gin.TestMode)
	e := gin.New()
	e.Use(RequestID(slog.New(slog.DiscardHandler)), PythonErrors(), newTable(nil).recover(slog.New(slog.DiscardHandler)))
	jsonAt := func(status int, body string) gin.HandlerFunc {
		return func(c *gin.Context) { httpx.WriteJSON(c.Writer, status, []byte(body)) }
	}
	e.GET("/openai", jsonAt(401, `{"error":{"message":"m","type":"authentication_error","param":null,"code":"not_logged_in"}}`))
	e.GET("/admin", jsonAt(404, `{"error":{"code":"unknown_instance","message":"unknown instance x"}}`))
	e.GET("/anthropic", jsonAt(401, `{"type":"error","error":{"type":"authentication_error","message":"m"}}`))
	e.GET("/ok", jsonAt(200, `{"error":null}`))
	e.GET("/panic", func(*gin.Context) { panic("boom") })
	e.GET("/stream", func(c *gin.Context) {
		c.Header("Content-Type", "text/event-stream")
		c.Writer.WriteHeader(200)
		_, _ = c.Writer.Write([]byte("data: [DONE]\n\n"))
		c.Writer.Flush()
	})
	srv := httptest.NewServer(e)
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
	e.NoRoute(newTable(nil).notFound)
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
