package chat

import (
	"strings"
	"testing"
)

// The 404 of a model nobody serves names the models there are, and quotes
// no more of the caller's name than a line's worth.
func TestUnknownModelError(t *testing.T) {
	tests := []struct {
		name string
		give *UnknownModelError
		want string
	}{
		{"the pool's models", &UnknownModelError{Model: "gpt-x", Models: []string{"a", "b"}},
			`no account serves the model "gpt-x"; the pool's models are a, b`},
		{"none listed yet", &UnknownModelError{Model: "gpt-x"}, `no account serves the model "gpt-x", and the pool lists no models yet`},
		{"a long name", &UnknownModelError{Model: strings.Repeat("m", 10_000), Models: []string{"a"}},
			`no account serves the model "` + strings.Repeat("m", maxQuotedName) + `..."; the pool's models are a`},
	}
	for _, tt := range tests {
		if got := tt.give.Error(); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}
