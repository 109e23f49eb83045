package anthropic

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

var decodeSeeds = []string{
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a"}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"b"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"r"}],"is_error":true}]}],` +
		`"tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"f"},"stop_sequences":["X"],"metadata":{"user_id":"u"}}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"thinking","thinking":"t"}]}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":null}]}`,
	`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":null}]}]}`,
	`{"model":"m","max_tokens":5,"system":"","messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"b","input":"x"}]},{"role":"user","content":"u"}]}`,
	`null`, `[]`, `{"messages":[{}]}`,
}

// FuzzDecodeMessages: any body decodes or fails with a request error, never
// panics, and a decoded request only holds neutral roles and object arguments.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, forCount bool) {
		d, err := decodeMessages(body, forCount)
		if err != nil {
			var re *apierr.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a request error", err)
			}
			return
		}
		for _, m := range d.chat.Messages {
			switch m.Role {
			case chat.RoleSystem, chat.RoleUser, chat.RoleAssistant, chat.RoleTool:
			default:
				t.Fatalf("role %q", m.Role)
			}
			for _, tc := range m.ToolCalls {
				var obj map[string]any
				if err := json.Unmarshal([]byte(tc.Arguments), &obj); err != nil {
					t.Fatalf("arguments %q: %v", tc.Arguments, err)
				}
			}
		}
	})
}

func BenchmarkDecodeMessages(b *testing.B) {
	body := []byte(decodeSeeds[1])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeMessages(body, false); err != nil {
			b.Fatal(err)
		}
	}
}

type nopWriter struct{ n int }

func (w *nopWriter) Event(_ string, data []byte) error {
	w.n += len(data)
	return nil
}

// BenchmarkEncodeTextDelta is the per-event cost of a streamed text delta.
func BenchmarkEncodeTextDelta(b *testing.B) {
	enc := newStreamEncoder(&nopWriter{}, "claude-x")
	if err := enc.Text("warm up"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := enc.Text("a token \"quoted\" ü\n"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeToolCall(b *testing.B) {
	enc := newStreamEncoder(&nopWriter{}, "claude-x")
	tc := chat.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	b.ReportAllocs()
	for b.Loop() {
		if err := enc.ToolCall(tc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	tests := []string{"", "plain", "q\"b\\s", "\n\r\t\x00\x1f", "ü日本\U0001F600", "\xff\xfe bad", "\u2028\u2029", "<&>"}
	for _, give := range tests {
		got := jsonx.AppendString(nil, give)
		var back, wantBack string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("jsonx.AppendString(%q) = %s: not JSON: %v", give, got, err)
			continue
		}
		want, _ := json.Marshal(give)
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("jsonx.AppendString(%q) round-trips to %q, want %q", give, back, wantBack)
		}
	}
}
