package openaiwire

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/poolgate/poolgate/internal/agents"
)

// fastRequestSeeds are request shapes on both sides of what the one-pass
// reader takes.
var fastRequestSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"m","messages":[{"role":"system","content":"be \"brief\"\n\u00e9 \ud83d\ude00"},{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}],` +
		`"stream":true,"stream_options":{"include_usage":true},"max_tokens":100,"temperature":0.2,"top_p":1,"n":1,"user":"u"}`,
	`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{}},"strict":false}}],` +
		`"tool_choice":"auto","parallel_tool_calls":true}`,
	`{"messages":[],"tools":[],"stop":["a","b"],"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false},"metadata":{"k":"v"}}`,
	`{"messages":null,"tools":null,"stream":null,"max_tokens":null,"model":null,"stream_options":null,"stop":null}`,
	`{"messages":[null,{"role":"user","content":"x","reasoning_content":"r","refusal":null,"name":"n"}],"tools":[null,{"type":"function","function":null}]}`,
	`{"messages":[{"role":"assistant","tool_calls":[null,{"function":null}]}],"stream_options":{"include_usage":null}}`,
	`{"messages":[{"role":"user","content":[null,{"type":"text","text":null,"refusal":"r"},{"type":"image_url","image_url":{"url":"x"}},{"Text":"a"},{"text":"a","text":"b"}]}]}`,
	`{"Model":"m","messages":[]}`,
	`{"model":"a","model":"b"}`,
	`{"messages":[{"role":"user","Content":"x"}]}`,
	`{"stream_options":{"include_usage":true},"stream_options":{}}`,
	`{"max_tokens":1.0}`, `{"max_tokens":1e2}`, `{"max_tokens":-0}`, `{"max_tokens":12345678901234567890}`,
	`{"temperature":1e400}`, `{"temperature":-0.0}`, `{"temperature":"1"}`,
	`{"model":5}`, `{"messages":{}}`, `{"stream":"true"}`,
	`{"seed":1}`, `{"response_format":{"type":"text"}}`, `{"service_tier":"auto"}`, `{"modalities":["text"]}`,
	`{"model":"bad \xff byte"}`, "{\"metadata\":{\"k\xff\":\"v\",\"k\":\"a\",\"k\":\"b\"}}", `{"mod\u0065l":"m"}`, `{"modeſ":"m"}`, `{"x":[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}`,
	`{"model":"m"} x`, `{"model":"m",}`, ` {"model" : "m" } `, `null`, `[]`, `"s"`,
}

// sameAsJSON checks that the one-pass reader, if it takes b, decodes what
// encoding/json decodes, and reports whether it took it.
func sameAsJSON(t *testing.T, b []byte) bool {
	t.Helper()
	var fast Request[Message]
	if !FastRequest(b, &fast) {
		return false
	}
	var slow Request[Message]
	if err := json.Unmarshal(b, &slow); err != nil {
		t.Fatalf("fast reader took %q, encoding/json fails it: %v", b, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q:\nfast reader   = %+v\nencoding/json = %+v", b, fast, slow)
	}
	for _, m := range fast.Messages {
		if len(m.Content) == 0 || m.Content[0] != '[' {
			continue
		}
		var fp, sp []Part
		if !FastParts(m.Content, &fp) {
			continue
		}
		if err := json.Unmarshal(m.Content, &sp); err != nil {
			t.Fatalf("fast reader took parts %q, encoding/json fails them: %v", m.Content, err)
		}
		if !reflect.DeepEqual(fp, sp) {
			t.Fatalf("parts %q:\nfast reader   = %+v\nencoding/json = %+v", m.Content, fp, sp)
		}
	}
	return true
}

// The one-pass reader decodes exactly what encoding/json decodes, whenever
// it takes a body at all. (The recorded agents' requests, tens of KiB each,
// are checked by TestFastRequestTakesCommonShapes rather than seeded here:
// minimising inputs that large stalls a short fuzz run.)
func FuzzFastRequest(f *testing.F) {
	for _, s := range fastRequestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsJSON(t, b) })
}

// The requests qwen-code sends (recorded from the released CLI) and the
// common shapes above are read in one pass, and decode as with
// encoding/json.
func TestFastRequestTakesCommonShapes(t *testing.T) {
	bodies := fastRequestSeeds[:7]
	for _, c := range agents.Clients() {
		if c.Protocol != "chat" {
			continue
		}
		fixtures, err := agents.Fixtures(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, ex := range fixtures {
			bodies = append(bodies, string(ex.Body))
		}
	}
	if len(bodies) < 10 {
		t.Fatalf("only %d bodies: the recorded chat requests are missing", len(bodies))
	}
	for _, b := range bodies {
		if !sameAsJSON(t, []byte(b)) {
			t.Errorf("fast reader gave up on %.300s", b)
		}
	}
}
