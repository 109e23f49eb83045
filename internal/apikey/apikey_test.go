package apikey

import (
	"net/http"
	"testing"
)

func TestFromRequest(t *testing.T) {
	tests := []struct {
		name       string
		auth, xAPI string
		want       string
	}{
		{"bearer", "Bearer sk-1", "", "sk-1"},
		{"bearer any case, spaces trimmed", "bEaReR   sk-1 ", "", "sk-1"},
		{"bearer wins over x-api-key", "Bearer sk-1", "sk-2", "sk-1"},
		{"x-api-key", "", " sk-2 ", "sk-2"},
		{"another scheme falls back to x-api-key", "Basic dXNlcjpwdw==", "sk-2", "sk-2"},
		{"bare word", "sk-1", "", ""},
		{"none", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "/", nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			if tt.xAPI != "" {
				r.Header.Set("X-Api-Key", tt.xAPI)
			}
			if got := FromRequest(r); got != tt.want {
				t.Errorf("FromRequest = %q, want %q", got, tt.want)
			}
		})
	}
}
