package lingma

import (
	"encoding/json"
	"testing"
)

// readChatParams reads what encoding/json reads, for any params.
func FuzzReadChatParams(f *testing.F) {
	for _, s := range []string{
		`{"requestId":"r-1","sessionId":"s-1","text":"hello "}`,
		`{"requestId":"r-1","reason":"success","statusCode":200,"fullAnswer":"hi"}`,
		`{"requestId":"r-1","statusCode":"429","errorMsg":"slow down","retryAfter":"30"}`,
		`{"requestId":"r-1","statusCode":429.0,"retryAfter":30}`,
		`{"requestId":"r-1","reason":"error","statusCode":500,"errorMessage":"boom"}`,
		`{"requestId":"r-1","statusCode":123456789012345678}`,
		`{"requestID":"r-1","text":"x"}`,
		`{"requestId":"r-1","requestId":"r-2"}`,
		`{"requestId":null,"text":"\u00e9\ud800 \n"}`,
		`{"requestId":"r","extra":{"a":[true,null]},"text":"t"}`,
		`{"requestId":"r"} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want chatParams
		werr := json.Unmarshal(b, &want)
		var got chatParams
		gerr := readChatParams(b, &got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: error %v, encoding/json's %v", b, gerr, werr)
		}
		if werr == nil && got != want {
			t.Fatalf("%q: read %+v, encoding/json %+v", b, got, want)
		}
	})
}

func TestReadChatParamsInOnePass(t *testing.T) {
	var p chatParams
	if !readChatFast([]byte(`{"requestId":"r-1","sessionId":"s-1","text":"hello "}`), &p) ||
		p.RequestID != "r-1" || p.SessionID != "s-1" || p.Text != "hello " {
		t.Errorf("the one-pass reader gave %+v", p)
	}
}
