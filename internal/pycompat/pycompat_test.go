package pycompat

import (
	"encoding/json"
	"testing"
)

func TestWithDetail(t *testing.T) {
	tests := []struct {
		give, want string
	}{
		{`{"error":{"message":"m","type":"t","param":null,"code":"c"}}` + "\n",
			`{"error":{"message":"m","type":"t","param":null,"code":"c"},"detail":{"error":{"message":"m","type":"t","param":null,"code":"c"}}}` + "\n"},
		{`{"error":{"code":"unknown_instance","message":"unknown instance x"}}`,
			`{"error":{"code":"unknown_instance","message":"unknown instance x"},"detail":{"error":{"code":"unknown_instance","message":"unknown instance x"}}}`},
		// Anthropic's shape, a body with detail already, and no JSON: as they are.
		{`{"type":"error","error":{"type":"overloaded_error","message":"m"}}`, `{"type":"error","error":{"type":"overloaded_error","message":"m"}}`},
		{`{"error":"x","detail":{"error":"x"}}`, `{"error":"x","detail":{"error":"x"}}`},
		{`{"status":"unavailable"}`, `{"status":"unavailable"}`},
		{`not json`, `not json`},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got := string(WithDetail([]byte(tt.give)))
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if json.Valid([]byte(tt.give)) && !json.Valid([]byte(got)) {
				t.Errorf("%s is not JSON", got)
			}
		})
	}
}
