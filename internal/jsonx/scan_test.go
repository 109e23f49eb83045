package jsonx

import "testing"

func TestUnquote(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{`"plain"`, "plain"},
		{`"line\nbreak \"q\" tab\t back\\slash"`, "line\nbreak \"q\" tab\t back\\slash"},
		{`"\u00e9 \ud83d\ude00 a\/b"`, "é 😀 a/b"},
		{"\"bad \xff byte\"", "bad \ufffd byte"},
		{`""`, ""},
		{`"`, ""},
		{`x`, ""},
	}
	for _, tt := range tests {
		if got := Unquote([]byte(tt.give)); got != tt.want {
			t.Errorf("Unquote(%s) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestNames(t *testing.T) {
	snake, camel := NewNames("model", "messages", "max_tokens"), NewNames("requestId", "text")
	for _, tt := range []struct {
		names *Names
		key   string
		index int
		folds bool
	}{
		{snake, "model", 0, true},
		{snake, "max_tokens", 2, true},
		{snake, "Model", -1, true},
		{snake, "MAX_TOKENS", -1, true},
		{snake, "mode", -1, false},
		{snake, "models", -1, false},
		{snake, "ma\u212a", -1, true}, // a Kelvin sign: encoding/json folds it to k
		{snake, "x_" + string(make([]byte, 40)), -1, false},
		{snake, string(make([]byte, 40)) + "\u017f", -1, true}, // non-ASCII past the length bound
		// Names in camel case: exact spelling reads, any other case folds.
		{camel, "requestId", 0, true},
		{camel, "text", 1, true},
		{camel, "requestid", -1, true},
		{camel, "RequestID", -1, true},
		{camel, "requestIds", -1, false},
	} {
		if got := tt.names.Index([]byte(tt.key)); got != tt.index {
			t.Errorf("Index(%q) = %d, want %d", tt.key, got, tt.index)
		}
		if got := tt.names.Folds([]byte(tt.key)); got != tt.folds {
			t.Errorf("Folds(%q) = %v, want %v", tt.key, got, tt.folds)
		}
	}
}
