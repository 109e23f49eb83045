package lingmarpc

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		method  string
		prompts bool
		want    string
	}{
		{name: "auth/status names and tokens", method: "auth/status",
			give: `{"jsonrpc":"2.0","id":3,"result":{"status":2,"id":"5930676910898027","accountId":"5930676910898027","name":"a@b.c","token":"pt-x","refreshToken":"rt-y","userType":"personal_standard","expireTime":1782107060847}}`,
			want: `{"id":3,"jsonrpc":"2.0","result":{"accountId":"<redacted>","expireTime":1782107060847,"id":"<redacted>","name":"<redacted>","refreshToken":"<redacted>","status":2,"token":"<redacted>","userType":"personal_standard"}}`},
		{name: "logged out keeps its empty values", method: "auth/status",
			give: `{"jsonrpc":"2.0","id":3,"result":{"status":1,"token":"","accountId":""}}`,
			want: `{"id":3,"jsonrpc":"2.0","result":{"accountId":"","status":1,"token":""}}`},
		{name: "login URL and nonce", method: "login/generateUrl",
			give: `{"jsonrpc":"2.0","id":4,"result":{"loginUrl":"https://account.example/login?state=abc&port=37510","nonce":"abc","success":true}}`,
			want: `{"id":4,"jsonrpc":"2.0","result":{"loginUrl":"https://account.example/login?port=%3Credacted%3E&state=%3Credacted%3E","nonce":"<redacted>","success":true}}`},
		{name: "prompt", method: "chat/ask",
			give: `{"jsonrpc":"2.0","id":5,"method":"chat/ask","params":{"questionText":"my secret plan <x>","chatContext":{"text":"my secret plan"},"mode":"normal","extra":{"modelConfig":{"key":"kmodel"}}}}`,
			want: `{"id":5,"jsonrpc":"2.0","method":"chat/ask","params":{"chatContext":{"text":"<redacted:prompt 14 bytes>"},"extra":{"modelConfig":{"key":"kmodel"}},"mode":"normal","questionText":"<redacted:prompt 18 bytes>"}}`},
		{name: "prompt kept under debug capture", method: "chat/ask", prompts: true,
			give: `{"jsonrpc":"2.0","id":5,"method":"chat/ask","params":{"questionText":"hi <x>"}}`,
			want: `{"id":5,"jsonrpc":"2.0","method":"chat/ask","params":{"questionText":"hi <x>"}}`},
		{name: "title", method: "session/title/update",
			give: `{"jsonrpc":"2.0","id":"7","method":"session/title/update","params":{"sessionId":"s","sessionTitle":"plan"}}`,
			want: `{"id":"7","jsonrpc":"2.0","method":"session/title/update","params":{"sessionId":"s","sessionTitle":"<redacted:prompt 4 bytes>"}}`},
		{name: "answers and tool names stay", method: "tool/invoke",
			give: `{"jsonrpc":"2.0","id":8,"method":"tool/invoke","params":{"name":"read_file","parameters":{"filePath":"a.go"},"async":false}}`,
			want: `{"id":8,"jsonrpc":"2.0","method":"tool/invoke","params":{"async":false,"name":"read_file","parameters":{"filePath":"a.go"}}}`},
		{name: "not JSON", give: `Content-Length`, want: `"<redacted unreadable message>"`},
	}
	for _, tt := range tests {
		if got := string(Redact([]byte(tt.give), tt.method, tt.prompts)); got != tt.want {
			t.Errorf("%s: Redact =\n%s\nwant\n%s", tt.name, got, tt.want)
		}
	}
}

// A transcript reads back as written, and a capped one ends with the
// truncation mark after the entries that fit.
func TestTranscriptRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	tw, err := NewTranscriptWriter(&buf, Header{Note: "test"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []string{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, `{"jsonrpc":"2.0","id":1,"result":{"a":"<redacted>"}}`}
	for i, m := range msgs {
		if err := tw.Write([]string{Send, Recv}[i], []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadTranscript(&buf)
	if err != nil || got.Header.Note != "test" || got.Truncated || len(got.Entries) != 2 ||
		got.Entries[0].Dir != Send || string(got.Entries[1].Msg) != msgs[1] {
		t.Fatalf("read back %+v, %v", got, err)
	}

	buf.Reset()
	tw, _ = NewTranscriptWriter(&buf, Header{}, 300)
	for range 10 {
		_ = tw.Write(Send, []byte(msgs[0]))
	}
	got, err = ReadTranscript(&buf)
	if err != nil || !got.Truncated || len(got.Entries) == 0 || len(got.Entries) >= 10 || buf.Len() > 300 {
		t.Errorf("capped transcript: %d entries, truncated %v, %d bytes, %v", len(got.Entries), got.Truncated, buf.Len(), err)
	}
}

func TestReadTranscriptErrors(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: ``, want: "no header"},
		{give: `{"transcript":"other","version":1}`, want: "not a lingma transcript"},
		{give: `{"transcript":"lingma","version":9}`, want: "version 9"},
		{give: "{\"transcript\":\"lingma\",\"version\":1}\n{\"dir\":\"up\",\"msg\":{}}", want: "line 2"},
		{give: "{\"transcript\":\"lingma\",\"version\":1}\n{\"dir\":\"send\",\"msg\":{\"jsonrpc\":\"1.0\"}}", want: "line 2"},
	}
	for _, tt := range tests {
		if _, err := ReadTranscript(strings.NewReader(tt.give)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ReadTranscript(%q) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
}
