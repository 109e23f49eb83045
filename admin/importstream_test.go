package admin

import (
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"
)

// readStreamed reads the export JSON field by field, the bundle's base64
// as a stream: in any field order, with JSON's escapes of base64 text, and
// refuses what is not the export's JSON.
func TestReadStreamed(t *testing.T) {
	payload := []byte("tar.gz bytes \xff\x00 of a work dir")
	b64 := base64.StdEncoding.EncodeToString(payload)
	escaped := strings.ReplaceAll(b64, "/", `\/`)
	tests := []struct {
		name    string
		give    string
		plain   bool
		want    string // the plain bundle, "" for none
		account string
		wantErr error
	}{
		{"the Python gateway's order", `{"instance":"lingma-0","account":"u1","raw_bytes":31,"bundle_b64":"` + b64 + `"}`, true, string(payload), "u1", nil},
		{"fields after the bundle", `{"bundle_b64": "` + escaped + `" , "account":"u2"}`, true, string(payload), "u2", nil},
		{"wrapped base64", `{"bundle_b64":"` + b64[:8] + `\n` + b64[8:] + `"}`, true, string(payload), "", nil},
		{"plain off", `{"bundle_b64":"` + b64 + `"}`, false, "", "", errPlainOff},
		{"unknown field", `{"sha":1}`, true, "", "", errBadBody},
		{"truncated", `{"bundle_b64":"` + b64[:10], true, "", "", errBadBody},
		{"bad base64", `{"bundle_b64":"%%%%"}`, true, "", "", errBadBody},
		{"not an object", `[1]`, true, "", "", errBadBody},
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
			if string(got) != tt.want || s.body.Account != tt.account || s.plainLen != int64(len(tt.want)) {
				t.Errorf("got %q (%d bytes), account %q; want %q, %q", got, s.plainLen, s.body.Account, tt.want, tt.account)
			}
		})
	}
}
