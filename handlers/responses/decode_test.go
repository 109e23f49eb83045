package responses

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

var decodeSeeds = []string{
	`{"model":"m","input":"hi"}`,
	`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"r"}]}]}`,
	`{"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":{}}],"tool_choice":{"type":"function","name":"f"}}`,
	`{"model":"m","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}],"instructions":"i","metadata":{"a":"b"}}`,
	`{"input":[null],"model":""}`,
	`{"model":"m","input":[{"role":"user"}]}`,
	`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":null}]}`,
	`[]`, `null`, `{"input":"\ud800"}`,
}

// FuzzDecodeCreate: any body decodes or fails with a request error, never
// panics, validates or fails with a request error naming a field, and a
// decoded request is internally consistent.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeCreate(body, nil)
		if err != nil {
			var re *apierr.RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error %v is not a request error", err)
			}
			return
		}
		// The request as the router would get it (without stored history)
		// is valid or refused with a request error naming a field.
		d.chat.Messages = d.input
		if err := apierr.Validate(&d.chat, d.param); err != nil {
			var re *apierr.RequestError
			if !errors.As(err, &re) || re.Param == "" {
				t.Fatalf("validation error %v is not a request error naming a field", err)
			}
		}
		if len(d.input) == 0 && len(d.items) == 0 {
			return // reasoning-only input
		}
		for _, m := range d.input {
			if m.Role != chat.RoleUser && m.Role != chat.RoleAssistant && m.Role != chat.RoleSystem && m.Role != chat.RoleTool {
				t.Fatalf("role %q", m.Role)
			}
		}
		for i := range d.items {
			if _, err := json.Marshal(wireItem(d.items[i])); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeCreate(b *testing.B) {
	body := []byte(decodeSeeds[1])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeCreate(body, nil); err != nil {
			b.Fatal(err)
		}
	}
}

type nopWriter struct{ n int }

func (w *nopWriter) Event(_ string, data []byte) error {
	w.n += len(data)
	return nil
}

func (w *nopWriter) Comment(string) error { return nil }

// BenchmarkEncodeTextDelta is the per-event cost of a streamed text delta.
func BenchmarkEncodeTextDelta(b *testing.B) {
	enc := newStreamEncoder(&nopWriter{}, &responseObject{ID: "resp_x", Output: []wireItem{}}, nil, endingOf(nil))
	if err := enc.text("warm up"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		enc.builder.text = enc.builder.text[:0] // keep the accumulated text from growing
		if err := enc.text("a token \"quoted\" ü\n"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeToolCall(b *testing.B) {
	enc := newStreamEncoder(&nopWriter{}, &responseObject{ID: "resp_x", Output: []wireItem{}}, nil, endingOf(nil))
	tc := chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}
	b.ReportAllocs()
	for b.Loop() {
		enc.resp.Output = enc.resp.Output[:0]
		if err := enc.toolCall(&tc); err != nil {
			b.Fatal(err)
		}
	}
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	tests := []string{"", "plain", "q\"b\\s", "\n\r\t\x00\x1f", "ü日本\U0001F600", "\xff\xfe bad", "\u2028\u2029", "<&>"}
	for _, give := range tests {
		got := jsonx.AppendString(nil, give)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("jsonx.AppendString(%q) = %s: not JSON: %v", give, got, err)
			continue
		}
		want, _ := json.Marshal(give)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("jsonx.AppendString(%q) round-trips to %q, want %q", give, back, wantBack)
		}
	}
}
