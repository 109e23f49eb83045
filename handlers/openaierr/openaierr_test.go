package openaierr

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
)

func TestWriteShape(t *testing.T) {
	tests := []struct {
		name           string
		give           apierr.Problem
		wantStatus     int
		wantBody       string
		wantRetryAfter string
	}{
		{"no param or code", apierr.ForStatus(http.StatusUnauthorized, "bad key"), 401,
			`{"error":{"message":"bad key","type":"authentication_error","param":null,"code":null}}` + "\n", ""},
		{"param, code and a retry hint", apierr.Problem{Class: apierr.RateLimited, Status: 429, Message: "wait \"a bit\"",
			Param: "p", Code: "overloaded", RetryAfter: 1500 * time.Millisecond}, 429,
			`{"error":{"message":"wait \"a bit\"","type":"rate_limit_error","param":"p","code":"overloaded"}}` + "\n", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, &tt.give)
			if rec.Code != tt.wantStatus || rec.Body.String() != tt.wantBody || rec.Header().Get("Retry-After") != tt.wantRetryAfter ||
				rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("got %d %q Retry-After %q Content-Type %q, want %d %q Retry-After %q application/json", rec.Code, rec.Body, rec.Header().Get("Retry-After"),
					rec.Header().Get("Content-Type"), tt.wantStatus, tt.wantBody, tt.wantRetryAfter)
			}
		})
	}
}
