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
	n := NewNames("model", "messages", "max_tokens")
	for _, tt := range []struct {
		key   string
		index int
		folds bool
	}{
		{"model", 0, true},
		{"max_tokens", 2, true},
		{"Model", -1, true},
		{"MAX_TOKENS", -1, true},
		{"mode", -1, false},
		{"models", -1, false},
		{"ma\u212a", -1, true}, // a Kelvin sign: encoding/json folds it to k
		{"x_" + string(make([]byte, 40)), -1, false},
		{string(make([]byte, 40)) + "\u017f", -1, true}, // non-ASCII past the length bound
	} {
		if got := n.Index([]byte(tt.key)); got != tt.index {
			t.Errorf("Index(%q) = %d, want %d", tt.key, got, tt.index)
		}
		if got := n.Folds([]byte(tt.key)); got != tt.folds {
			t.Errorf("Folds(%q) = %v, want %v", tt.key, got, tt.folds)
		}
	}
	// Names in camel case: exact spelling reads, any other case folds.
	n = NewNames("requestId", "text")
	for _, tt := range []struct {
		key   string
		index int
		folds bool
	}{
		{"requestId", 0, true},
		{"text", 1, true},
		{"requestid", -1, true},
		{"RequestID", -1, true},
		{"requestIds", -1, false},
	} {
		if got := n.Index([]byte(tt.key)); got != tt.index {
			t.Errorf("Index(%q) = %d, want %d", tt.key, got, tt.index)
		}
		if got := n.Folds([]byte(tt.key)); got != tt.folds {
			t.Errorf("Folds(%q) = %v, want %v", tt.key, got, tt.folds)
		}
	}
}
