package admin

import (
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
)

// readStreamed reads the export JSON field by field, the bundle's base64
// as a stream: in any field order, with JSON's escapes of base64 text; or a
// bare bundle's base64 (LINGMA_SESSION_BUNDLE's value), a tar.gz being a
// plain bundle and anything else a sealed one; and refuses what is neither.
func TestReadStreamed(t *testing.T) {
	payload := []byte("tar.gz bytes \xff\x00 of a work dir")
	b64 := base64.StdEncoding.EncodeToString(payload)
	escaped := strings.ReplaceAll(b64, "/", `\/`)
	gz := append([]byte{0x1f, 0x8b}, "a gzip stream of a work dir"...)
	gz64 := base64.StdEncoding.EncodeToString(gz)
	tests := []struct {
		name    string
		give    string
		plain   bool
		want    string // the plain bundle, "" for none
		account string
		wantErr error
		sealed  string // the sealed bundle, "" for none
	}{
		{"the Python gateway's order", `{"instance":"lingma-0","account":"u1","raw_bytes":31,"bundle_b64":"` + b64 + `"}`, true, string(payload), "u1", nil, ""},
		{"fields after the bundle", `{"bundle_b64": "` + escaped + `" , "account":"u2"}`, true, string(payload), "u2", nil, ""},
		{"wrapped base64", `{"bundle_b64":"` + b64[:8] + `\n` + b64[8:] + `"}`, true, string(payload), "", nil, ""},
		{"plain off", `{"bundle_b64":"` + b64 + `"}`, false, "", "", errPlainOff, ""},
		{"unknown field", `{"sha":1}`, true, "", "", errBadBody, ""},
		{"truncated", `{"bundle_b64":"` + b64[:10], true, "", "", errBadBody, ""},
		{"bad base64", `{"bundle_b64":"%%%%"}`, true, "", "", errBadBody, ""},
		{"not an object", `[1]`, true, "", "", errBadBody, ""},
		{"bare plain", gz64, true, string(gz), "", nil, ""},
		{"bare plain, wrapped, with a final newline", "  " + gz64[:12] + "\n" + gz64[12:] + "\n", true, string(gz), "", nil, ""},
		{"bare plain as a JSON string", `"` + gz64 + `"`, true, string(gz), "", nil, ""},
		{"bare plain off", gz64, false, "", "", errPlainOff, ""},
		{"bare sealed", b64, false, "", "", nil, string(payload)},
		{"bare, not base64", "hello there", true, "", "", errBadBody, ""},
		{"empty", "  \n", true, "", "", errBadBody, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := readStreamed(strings.NewReader(tt.give), tt.plain)
			defer s.close()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			var got []byte
			if s.plain != nil {
				got, _ = io.ReadAll(s.plain)
			}
			if string(got) != tt.want || s.body.Account != tt.account || s.plainLen != int64(len(tt.want)) || string(s.sealed) != tt.sealed {
				t.Errorf("got %q (%d bytes), account %q, sealed %q; want %q, %q, %q", got, s.plainLen, s.body.Account, s.sealed,
					tt.want, tt.account, tt.sealed)
			}
		})
	}
}
