package gemini

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/internal/agents"
	"github.com/poolgate/poolgate/internal/chat"
)

func msg(role, content string) chat.Message { return chat.Message{Role: role, Content: content} }

func TestDecode(t *testing.T) {
	temp, topP := 0.5, 0.9
	tests := []struct {
		name        string
		give        string
		want        chat.Request
		wantDropped []string
	}{
		{
			name: "system, roles and parts",
			give: `{"systemInstruction":{"parts":[{"text":"Be brief."},{"text":"Be kind."}]},"contents":[` +
				`{"role":"user","parts":[{"text":"<ctx>"},{"text":"hi"}]},{"role":"model","parts":[{"text":"You "},{"text":"said"}]},` +
				`{"parts":[{"text":"more"}]}]}`,
			want: chat.Request{Messages: []chat.Message{msg("system", "Be brief.\n\nBe kind."), msg("user", "<ctx>\n\nhi"),
				msg("assistant", "You said"), msg("user", "more")}},
		},
		{
			name: "calls and results with ids, a repeated result read once",
			give: `{"contents":[{"role":"user","parts":[{"text":"read it"}]},` +
				`{"role":"model","parts":[{"functionCall":{"id":"c1","name":"read_file","args":{"path":"a"}},"thoughtSignature":"sig"}]},` +
				`{"role":"user","parts":[{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"hello"}}},` +
				`{"functionResponse":{"id":"c1","name":"read_file","response":{"output":"hello"}}}]}]}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "read it"),
				{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path":"a"}`}}},
				{Role: "tool", ToolCallID: "c1", Name: "read_file", Content: "hello"}}},
			wantDropped: []string{dropThoughtSignature, dropRepeatedResult},
		},
		{
			name: "calls without ids are paired by name, in order",
			give: `{"contents":[{"role":"user","parts":[{"text":"go"}]},` +
				`{"role":"model","parts":[{"functionCall":{"name":"f"}},{"functionCall":{"name":"g","args":{}}},{"functionCall":{"name":"f","args":{"n":2}}}]},` +
				`{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"error":"no"}}},{"functionResponse":{"name":"g","response":{"a":[1, 2]}}},` +
				`{"functionResponse":{"name":"f","response":{"output":{"x":1}}}},{"text":"now what?"}]}]}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "go"),
				{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "f", Arguments: "{}"}, {ID: "call_2", Name: "g", Arguments: "{}"},
					{ID: "call_3", Name: "f", Arguments: `{"n":2}`}}},
				{Role: "tool", ToolCallID: "call_1", Name: "f", Content: "Error: no"},
				{Role: "tool", ToolCallID: "call_2", Name: "g", Content: `{"a":[1,2]}`},
				{Role: "tool", ToolCallID: "call_3", Name: "f", Content: `{"x":1}`},
				msg("user", "now what?")}},
		},
		{
			name: "functions in both schema forms, tool config ANY with one name",
			give: `{"contents":[{"parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[` +
				`{"name":"a","description":"A","parameters":{"type":"OBJECT","properties":{"n":{"type":"INTEGER","nullable":true},` +
				`"l":{"type":"ARRAY","items":{"type":"STRING"},"maxItems":"3"}},"propertyOrdering":["n","l"]}},` +
				`{"name":"b","parametersJsonSchema":{"type":"object","properties":{"s":{"type":"string"}}}}]},{"googleSearch":{}}],` +
				`"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["b"]}}}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "x")},
				Tools:      []chat.Tool{{Name: "b", Parameters: json.RawMessage(`{"properties":{"s":{"type":"string"}},"type":"object"}`)}},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "b"}},
			wantDropped: []string{dropHostedTools},
		},
		{
			name: "the Gemini Schema becomes JSON Schema; NONE forbids calls",
			give: `{"contents":[{"parts":[{"text":"x"}]}],"tools":[{"function_declarations":[` +
				`{"name":"a","parameters":{"type":"OBJECT","properties":{"n":{"type":"INTEGER","nullable":true},` +
				`"l":{"type":"ARRAY","items":{"type":"STRING"},"maxItems":"3"}},"propertyOrdering":["n","l"]}}]}],` +
				`"tool_config":{"function_calling_config":{"mode":"NONE"}}}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "x")},
				Tools: []chat.Tool{{Name: "a", Parameters: json.RawMessage(`{"properties":{"l":{"items":{"type":"string"},"maxItems":3,"type":"array"},` +
					`"n":{"type":["integer","null"]}},"type":"object"}`)}},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolNone}},
		},
		{
			name: "generation config, structured output, thinking dropped",
			give: `{"contents":[{"parts":[{"text":"rate"}]}],"generationConfig":{"maxOutputTokens":64,"temperature":0.5,"topP":0.9,"topK":64,` +
				`"stopSequences":["END"],"candidateCount":1,"responseMimeType":"application/json","responseJsonSchema":{"type":"OBJECT",` +
				`"properties":{"score":{"type":"INTEGER"}}},"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"HIGH"}},` +
				`"safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "rate")}, MaxTokens: 64, Temperature: &temp, TopP: &topP,
				TopK: ptr(64), Stop: []string{"END"}, OneShot: true,
				Format: chat.Format{JSON: true, Schema: json.RawMessage(`{"properties":{"score":{"type":"integer"}},"type":"object"}`)}},
			wantDropped: []string{dropSafetySettings, dropThinkingConfig},
		},
		{
			name: "snake_case as Google's curl examples write it",
			give: `{"system_instruction":{"parts":[{"text":"S"}]},"contents":[{"role":"user","parts":[{"text":"q"}]}],` +
				`"generation_config":{"max_output_tokens":8,"response_mime_type":"application/json"}}`,
			want: chat.Request{Messages: []chat.Message{msg("system", "S"), msg("user", "q")}, MaxTokens: 8, OneShot: true,
				Format: chat.Format{JSON: true}},
		},
		{
			name: "every other snake_case spelling",
			give: `{"contents":[{"role":"user","parts":[{"inline_data":{"mime_type":"image/png","data":"AAAA"}},{"text":"what"}]},` +
				`{"role":"model","parts":[{"function_call":{"id":"c1","name":"f","args":{"a":1}},"thought_signature":"sig"}]},` +
				`{"role":"user","parts":[{"function_response":{"id":"c1","name":"f","response":{"output":"ok"}}}]}],` +
				`"generation_config":{"top_p":0.9,"top_k":64,"candidate_count":1,"stop_sequences":["END"],"response_mime_type":"application/json",` +
				`"response_json_schema":{"type":"object"},"thinking_config":{"thinking_budget":0}},"safety_settings":[{"category":"X","threshold":"BLOCK_NONE"}]}`,
			want: chat.Request{Messages: []chat.Message{msg("user", inlineDataNote+"\n\nwhat"),
				{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}},
				{Role: "tool", ToolCallID: "c1", Name: "f", Content: "ok"}},
				TopP: &topP, TopK: ptr(64), Stop: []string{"END"}, OneShot: true,
				Format: chat.Format{JSON: true, Schema: json.RawMessage(`{"type":"object"}`)}},
			wantDropped: []string{dropSafetySettings, dropThinkingConfig, dropInlineData, dropThoughtSignature},
		},
		{
			name: "inline data in history becomes a note; thoughts are dropped",
			give: `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}},{"text":"what is it"}]},` +
				`{"role":"model","parts":[{"text":"thinking...","thought":true},{"text":"a cat"}]},{"role":"user","parts":[{"text":"sure?"}]}]}`,
			want:        chat.Request{Messages: []chat.Message{msg("user", inlineDataNote+"\n\nwhat is it"), msg("assistant", "a cat"), msg("user", "sure?")}},
			wantDropped: []string{dropInlineData, dropThoughts},
		},
		{
			name: "ANY with several names offers only those",
			give: `{"contents":[{"parts":[{"text":"x"}]}],"tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"},{"name":"c"}]}],` +
				`"toolConfig":{"functionCallingConfig":{"mode":"any","allowedFunctionNames":["c","a"]}}}`,
			want: chat.Request{Messages: []chat.Message{msg("user", "x")}, Tools: []chat.Tool{{Name: "a"}, {Name: "c"}},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolRequired}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := decodeGenerate([]byte(tt.give), "gemini-x", false)
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Model = "gemini-x"
			if !reflect.DeepEqual(d.chat, tt.want) {
				t.Errorf("got  %+v\nwant %+v", d.chat, tt.want)
			}
			if got := d.dropped.Fields(); !slices.Equal(got, tt.wantDropped) {
				t.Errorf("dropped %v, want %v", got, tt.wantDropped)
			}
		})
	}
}

func ptr(n int) *int { return &n }

func TestDecodeErrors(t *testing.T) {
	hi := `"contents":[{"parts":[{"text":"hi"}]}]`
	tests := []struct {
		name, give, want string
	}{
		{"bad json", `{"contents":`, "invalid JSON"},
		{"no contents", `{}`, "contents: at least one"},
		{"bad role", `{"contents":[{"role":"system","parts":[{"text":"x"}]}]}`, "contents[0].role"},
		{"prefill", `{"contents":[{"parts":[{"text":"x"}]},{"role":"model","parts":[{"text":"y"}]}]}`, "prefill"},
		{"call in a user content", `{"contents":[{"parts":[{"functionCall":{"name":"f"}}]}]}`, "contents[0].parts[0]: functionCall"},
		{"args not an object", `{"contents":[{"parts":[{"text":"x"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":[1]}}]},` +
			`{"parts":[{"text":"y"}]}]}`, "args: must be an object"},
		{"only an image", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AA"}}]}]}`, "only inline data"},
		{"empty part", `{"contents":[{"parts":[{}]}]}`, "contents[0].parts[0]"},
		{"two candidates", `{` + hi + `,"generationConfig":{"candidateCount":2}}`, "candidateCount"},
		{"logprobs", `{` + hi + `,"generationConfig":{"responseLogprobs":true}}`, "responseLogprobs"},
		{"audio out", `{` + hi + `,"generationConfig":{"responseModalities":["AUDIO"]}}`, "responseModalities"},
		{"enum mime", `{` + hi + `,"generationConfig":{"responseMimeType":"text/x.enum"}}`, "responseMimeType"},
		{"schema without json", `{` + hi + `,"generationConfig":{"responseSchema":{"type":"STRING"}}}`, "needs responseMimeType"},
		{"both schemas", `{` + hi + `,"generationConfig":{"responseMimeType":"application/json","responseSchema":{},"responseJsonSchema":{}}}`, "mutually exclusive"},
		{"temperature", `{` + hi + `,"generationConfig":{"temperature":3}}`, "temperature"},
		{"top_p", `{` + hi + `,"generationConfig":{"topP":2}}`, "generationConfig.topP"},
		{"cached content", `{` + hi + `,"cachedContent":"cachedContents/1"}`, "cachedContent"},
		{"both parameter forms", `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f","parameters":{},"parametersJsonSchema":{}}]}]}`, "mutually exclusive"},
		{"schema not an object", `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f","parameters":[]}]}]}`, "tools[0].functionDeclarations[0].parameters"},
		{"duplicate function", `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f"}]},{"functionDeclarations":[{"name":"f"}]}]}`, "tools[1].functionDeclarations[0].name"},
		{"unknown mode", `{` + hi + `,"toolConfig":{"functionCallingConfig":{"mode":"SOMETIMES"}}}`, "mode"},
		{"unknown allowed name", `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["g"]}}}`, "allowedFunctionNames[0]"},
		{"ANY without functions", `{` + hi + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`, "toolConfig.functionCallingConfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeGenerate([]byte(tt.give), "m", false)
			if err == nil {
				t.Fatalf("accepted %s", tt.give)
			}
			if p := apierr.Classify(err); p.Status != http.StatusBadRequest || !strings.Contains(p.Message, tt.want) {
				t.Errorf("got %d %q, want 400 mentioning %q", p.Status, p.Message, tt.want)
			}
		})
	}
}

// Gemini CLI's recorded requests decode: its turns offer its tools, its side
// requests ask for JSON and are one-shot, and the resumed session's doubled
// function response is read once.
func TestDecodeGeminiCLIRequests(t *testing.T) {
	c := geminiCLI(t)
	exs, err := agents.Fixtures(c)
	if err != nil {
		t.Fatal(err)
	}
	for i, ex := range exs {
		a, ok := ParseAction(ex.Path)
		if !ok {
			t.Fatalf("request %d: path %s names no model's method", i+1, ex.Path)
		}
		d, err := decodeGenerate(ex.Body, a.Model, a.Method == MethodStream)
		if err != nil {
			t.Fatalf("request %d (%s %s): %v", i+1, ex.Scenario, ex.Path, err)
		}
		req := &d.chat
		results := map[string]int{}
		for _, m := range req.Messages {
			if m.Role == chat.RoleTool {
				results[m.ToolCallID]++
			}
		}
		for id, n := range results {
			if n != 1 {
				t.Errorf("request %d: %d results for call %s, want 1", i+1, n, id)
			}
		}
		switch {
		case a.Method == MethodStream && (len(req.Tools) == 0 || req.OneShot):
			t.Errorf("request %d: the turn offers %d tools (one-shot %v)", i+1, len(req.Tools), req.OneShot)
		case a.Method == MethodGenerate && (!req.Format.JSON || !req.OneShot || !json.Valid(req.Format.Schema)):
			t.Errorf("request %d: the side request's format %+v, one-shot %v", i+1, req.Format, req.OneShot)
		case !slices.Contains(d.dropped.Fields(), dropThinkingConfig):
			t.Errorf("request %d: thinkingConfig not dropped visibly (%v)", i+1, d.dropped.Fields())
		}
	}
}

func geminiCLI(t *testing.T) agents.Client {
	t.Helper()
	for _, c := range agents.Clients() {
		if c.Protocol == "gemini" {
			return c
		}
	}
	t.Fatal("no Gemini client among the pinned agents")
	return agents.Client{}
}

func TestParseAction(t *testing.T) {
	tests := []struct {
		give string
		want Action
		ok   bool
	}{
		{"/v1beta/models/gemini-2.5-pro:generateContent", Action{"gemini-2.5-pro", MethodGenerate}, true},
		{"/v1/models/gemini-3.1-pro-preview:streamGenerateContent", Action{"gemini-3.1-pro-preview", MethodStream}, true},
		{"/v1beta/models/x", Action{}, false},
		{"/v1beta/models/:countTokens", Action{}, false},
		{"/v1beta/models/a/b:countTokens", Action{}, false},
	}
	for _, tt := range tests {
		if got, ok := ParseAction(tt.give); got != tt.want || ok != tt.ok {
			t.Errorf("ParseAction(%q) = %+v, %v; want %+v, %v", tt.give, got, ok, tt.want, tt.ok)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"contents":[{"parts":[{"text":"hi"}]}]}`,
		`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"role":"user","parts":[{"text":"a"}]},{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]},` +
			`{"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"r"}}}]}],"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT"}}]}]}`,
		`{"contents":[{"parts":[{"text":"x"}]}],"generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"ARRAY","items":{"anyOf":[{"type":"STRING"}]}}}}`,
		`{"contents":null}`, `[]`, `null`, `{"contents":[{"parts":[null]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeGenerate(body, "m", true)
		if err == nil && len(d.chat.Messages) == 0 {
			t.Fatalf("accepted %q with no messages", body)
		}
		if err != nil {
			if p := apierr.Classify(err); p.Status != http.StatusBadRequest {
				t.Fatalf("decode error %v maps to %d, want 400", err, p.Status)
			}
		}
	})
}
