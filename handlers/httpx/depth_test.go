package httpx

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDepthOK(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		give string
		max  int
		want bool
	}{
		{`{}`, 1, true},
		{`{"a":[1]}`, 1, false},
		{`{"a":[1]}`, 2, true},
		{nest(128), 128, true},
		{nest(129), 128, false},
		{`{"a":"[[[[[[["}`, 1, true},            // brackets in a string
		{`{"a":"\"[[[[[["}`, 1, true},           // an escaped quote does not end it
		{`{"a":"\\"}`, 1, true},                 // an escaped backslash before the end
		{`{"a":"\\\\\"[[[[","b":[]}`, 1, false}, // five backslashes: the quote is escaped
		{`{"a":"\\\\"` + `,"b":[[1]]}`, 2, false},
		{`"[[[`, 0, true}, // a string that never ends: the decoder's to refuse
		{`]]]][[`, 2, true},
	}
	for _, tt := range tests {
		if got := depthOK([]byte(tt.give), tt.max); got != tt.want {
			t.Errorf("depthOK(%q, %d) = %v, want %v", tt.give, tt.max, got, tt.want)
		}
	}
}

// FuzzDepthOK holds depthOK to encoding/json: for any valid JSON text, it
// says the text nests no deeper than max exactly when a decoder that counts
// the levels agrees.
func FuzzDepthOK(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":"]["}]}`, `["\\\"[", [[]]]`, `"x"`, `[[[["\u005b"]]]]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var v any
		if json.Unmarshal([]byte(s), &v) != nil {
			return
		}
		want := depth(v)
		for _, limit := range []int{max(want-1, 0), want} {
			if got := depthOK([]byte(s), limit); got != (want <= limit) {
				t.Errorf("depthOK(%q, %d) = %v; the text nests %d deep", s, limit, got, want)
			}
		}
	})
}

func depth(v any) int {
	d := 0
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	case []any:
		for _, e := range v {
			d = max(d, depth(e))
		}
		return d + 1
	}
	return 0
}

func BenchmarkDepthOK(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(`lorem \"ipsum\" dolor `, 5000) + `"}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		depthOK(body, MaxDepth)
	}
}
