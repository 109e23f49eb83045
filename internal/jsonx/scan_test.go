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
