package modelserver

import (
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

// TestEncodeBytes pins the request body the driver sends, byte for byte:
// servers see its field order and which fields are left out.
func TestEncodeBytes(t *testing.T) {
	short := agentTurn()
	short.Messages[0].Content = "Be brief."
	short.Messages[3].Content = "pool/router.go:42"
	tests := []struct {
		name string
		turn *chat.Turn
		want string
	}{
		{"text", userTurn("hi <b>"), `{"model":"kmodel","messages":[{"role":"user","content":"hi <b>"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"whole, no model", &chat.Turn{Whole: true, Messages: []chat.Message{{Role: chat.RoleUser, Content: ""}}},
			`{"messages":[{"role":"user","content":""}],"stream":false}`},
		{"agent", short, `{"model":"kmodel","messages":[` +
			`{"role":"system","content":"Be brief."},` +
			`{"role":"user","content":"Find where the retry budget is configured."},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"grep","arguments":"{\"pattern\":\"retry\"}"}}]},` +
			`{"role":"tool","content":"pool/router.go:42","tool_call_id":"call_1","name":"grep"},` +
			`{"role":"user","content":"Great, and what is the \"default\"?"}],` +
			`"stream":true,"stream_options":{"include_usage":true},` +
			`"tools":[{"type":"function","function":{"name":"grep","description":"Search files","parameters":{"type":"object","properties":{"pattern":{"type":"string"}}}}},` +
			`{"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{}}}}],` +
			`"tool_choice":{"function":{"name":"grep"},"type":"function"},"max_tokens":512,"temperature":0.2,` +
			`"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"}}}}`},
	}
	d := New(Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := d.encode(tt.turn, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer d.release(p)
			if got := strings.TrimSuffix(p.buf.String(), "\n"); got != tt.want {
				t.Errorf("body\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}
