package jsonx

import (
	"bytes"
	"encoding/json"
	"testing"
)

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\slash", "\n\r\t\x00\x1f", "é ü 日本", "\u2028\u2029", "\xff\xfe bad", "<>&"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s is not valid JSON: %v", s, got, err)
		}
		// encoding/json is the reference for what the string decodes to
		// (invalid UTF-8 becomes U+FFFD in both).
		ref, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(ref, &want)
		if back != want {
			t.Errorf("AppendString(%q) decodes to %q, want %q", s, back, want)
		}
		if n := StringLen(s); n != len(got) {
			t.Errorf("StringLen(%q) = %d, AppendString wrote %d bytes", s, n, len(got))
		}
		// Drivers that encode with encoding/json (HTML escaping off) rely
		// on StringLen as an upper bound of its length too.
		var std bytes.Buffer
		enc := json.NewEncoder(&std)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s)
		if n := std.Len() - 1; n > StringLen(s) {
			t.Errorf("encoding/json writes %q in %d bytes, more than StringLen's %d", s, n, StringLen(s))
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for b.Loop() {
		buf = AppendString(buf[:0], "a typical delta with \"quotes\" and a newline\n")
	}
}
