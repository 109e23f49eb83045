package bundle

import (
	"bytes"
	"testing"
)

// FuzzOpen feeds Open arbitrary sealed bytes and, to get past the seal,
// arbitrary payloads sealed with the right key. Open must never panic, and
// whatever it accepts must be a bundle Install can write safely.
func FuzzOpen(f *testing.F) {
	key := bytes.Repeat([]byte{0x42}, KeySize)
	ok := validEntries(f)
	f.Add(tarGz(f, ok))
	f.Add(tarGz(f, append(ok[:len(ok):len(ok)], reg("../x", "x"))))
	f.Add(tarGz(f, ok[1:]))
	f.Add(gzipOf(f, "not a tar"))
	f.Add([]byte{})
	sealed, _, err := Pack(credWorkDir(f, simCreds("fuzz")), simSpec(), "fuzz", key, testNow)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sealed)
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = Open(data, key, simSpec(), Limits{})
		s, err := Seal(key, data)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Open(s, key, simSpec(), Limits{})
		if err != nil {
			return
		}
		for _, cf := range b.files {
			if !validFileName(cf.name) {
				t.Fatalf("accepted file name %q", cf.name)
			}
		}
		if !b.Manifest.hasFile("id") || !b.Manifest.hasFile("user") {
			t.Fatalf("accepted a bundle without the required files: %+v", b.Manifest)
		}
	})
}
