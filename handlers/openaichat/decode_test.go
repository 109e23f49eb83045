package openaichat

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// errorFields is the error object of an error body.
type errorFields struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// decodeErrorBody checks the error shape (all four keys present) and
// returns it.
func decodeErrorBody(t *testing.T, rec *httptest.ResponseRecorder) errorFields {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("error body %q: %v", rec.Body, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Errorf("got error body %s, want key %q", rec.Body, k)
		}
	}
	if got := rec.Header().Get("Content-Type"); got != "application/json" {
		t.Errorf("got Content-Type %q, want application/json", got)
	}
	var body struct {
		Error errorFields `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	return body.Error
}

// msgs wraps one message into a minimal valid body with extra top-level
// fields.
func withMsg(msg string, extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"model":"m","messages":[` + msg + `]` + extra + `}`
}

const userHi = `{"role":"user","content":"hi"}`

func TestValidation(t *testing.T) {
	tests := []struct {
		name      string
		give      string
		wantParam string // "" for null
	}{
		{name: "invalid json", give: `{"model":`, wantParam: ""},
		{name: "not an object", give: `[1,2]`, wantParam: ""},
		{name: "empty body", give: ``, wantParam: ""},
		{name: "missing messages", give: `{"model":"m"}`, wantParam: "messages"},
		{name: "null messages", give: `{"model":"m","messages":null}`, wantParam: "messages"},
		{name: "empty messages", give: `{"model":"m","messages":[]}`, wantParam: "messages"},
		{name: "messages not array", give: `{"model":"m","messages":"hi"}`, wantParam: "messages"},
		{name: "model wrong type", give: `{"model":5,"messages":[` + userHi + `]}`, wantParam: "model"},
		{name: "message not object", give: withMsg(`"hi"`, ""), wantParam: "messages[0]"},
		{name: "missing role", give: withMsg(`{"content":"hi"}`, ""), wantParam: "messages[0].role"},
		{name: "unknown role", give: withMsg(`{"role":"wizard","content":"hi"}`, ""), wantParam: "messages[0].role"},
		{name: "function role", give: withMsg(`{"role":"function","name":"f","content":"x"}`, ""), wantParam: "messages[0].role"},
		{name: "role wrong type", give: withMsg(`{"role":1,"content":"hi"}`, ""), wantParam: "messages[0].role"},
		{name: "user content null", give: withMsg(`{"role":"user","content":null}`, ""), wantParam: "messages[0].content"},
		{name: "content number", give: withMsg(`{"role":"user","content":3}`, ""), wantParam: "messages[0].content"},
		{name: "image alone", give: withMsg(`{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}`, ""),
			wantParam: "messages[0].content"},
		{name: "audio alone", give: withMsg(`{"role":"user","content":[{"type":"input_audio"}]}`, ""), wantParam: "messages[0].content"},
		{name: "unknown part", give: withMsg(`{"role":"user","content":[{"type":"hologram"}]}`, ""), wantParam: "messages[0].content[0].type"},
		{name: "text part without text", give: withMsg(`{"role":"user","content":[{"type":"text"}]}`, ""), wantParam: "messages[0].content[0].text"},
		{name: "part text wrong type", give: withMsg(`{"role":"user","content":[{"type":"text","text":1}]}`, ""), wantParam: "messages[0].content.text"},
		{name: "tool without id", give: withMsg(`{"role":"tool","content":"x"}`, ""), wantParam: "messages[0].tool_call_id"},
		{name: "tool_calls on user", give: withMsg(`{"role":"user","content":"x","tool_calls":[{"id":"a","type":"function","function":{"name":"f"}}]}`, ""),
			wantParam: "messages[0].tool_calls"},
		{name: "tool call no name", give: withMsg(`{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{}}]}`, ""),
			wantParam: "messages[0].tool_calls[0].function.name"},
		{name: "tool call bad type", give: withMsg(`{"role":"assistant","tool_calls":[{"id":"a","type":"custom","function":{"name":"f"}}]}`, ""),
			wantParam: "messages[0].tool_calls[0].type"},
		{name: "tool call args object", give: withMsg(`{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]}`, ""),
			wantParam: "messages[0].tool_calls.function.arguments"},
		{name: "legacy function_call msg", give: withMsg(`{"role":"assistant","function_call":{"name":"f"}}`, ""), wantParam: "messages[0].function_call"},
		{name: "n 2", give: withMsg(userHi, `"n":2`), wantParam: "n"},
		{name: "n wrong type", give: withMsg(userHi, `"n":"1"`), wantParam: "n"},
		{name: "logprobs", give: withMsg(userHi, `"logprobs":true`), wantParam: "logprobs"},
		{name: "top_logprobs", give: withMsg(userHi, `"top_logprobs":3`), wantParam: "top_logprobs"},
		{name: "audio", give: withMsg(userHi, `"audio":{"voice":"alloy","format":"mp3"}`), wantParam: "audio"},
		{name: "modalities audio", give: withMsg(userHi, `"modalities":["text","audio"]`), wantParam: "modalities"},
		{name: "modalities wrong type", give: withMsg(userHi, `"modalities":"text"`), wantParam: "modalities"},
		{name: "prediction", give: withMsg(userHi, `"prediction":{"type":"content","content":"x"}`), wantParam: "prediction"},
		{name: "functions", give: withMsg(userHi, `"functions":[{"name":"f"}]`), wantParam: "functions"},
		{name: "function_call", give: withMsg(userHi, `"function_call":"auto"`), wantParam: "function_call"},
		{name: "strict json_schema", give: withMsg(userHi, `"response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true}}`),
			wantParam: "response_format"},
		{name: "unknown response_format", give: withMsg(userHi, `"response_format":{"type":"yaml"}`), wantParam: "response_format.type"},
		{name: "temperature high", give: withMsg(userHi, `"temperature":2.5`), wantParam: "temperature"},
		{name: "temperature negative", give: withMsg(userHi, `"temperature":-0.1`), wantParam: "temperature"},
		{name: "temperature string", give: withMsg(userHi, `"temperature":"hot"`), wantParam: "temperature"},
		{name: "top_p high", give: withMsg(userHi, `"top_p":1.5`), wantParam: "top_p"},
		{name: "presence_penalty", give: withMsg(userHi, `"presence_penalty":3`), wantParam: "presence_penalty"},
		{name: "max_tokens negative", give: withMsg(userHi, `"max_tokens":-1`), wantParam: "max_tokens"},
		{name: "max_tokens float", give: withMsg(userHi, `"max_tokens":1.5`), wantParam: "max_tokens"},
		{name: "max_completion_tokens negative", give: withMsg(userHi, `"max_completion_tokens":-5`), wantParam: "max_completion_tokens"},
		{name: "stream wrong type", give: withMsg(userHi, `"stream":"yes"`), wantParam: "stream"},
		{name: "include_usage wrong type", give: withMsg(userHi, `"stream_options":{"include_usage":1}`), wantParam: "stream_options.include_usage"},
		{name: "stop too many", give: withMsg(userHi, `"stop":["a","b","c","d","e"]`), wantParam: "stop"},
		{name: "stop wrong type", give: withMsg(userHi, `"stop":5`), wantParam: "stop"},
		{name: "stop element wrong type", give: withMsg(userHi, `"stop":["a",1]`), wantParam: "stop"},
		{name: "user wrong type", give: withMsg(userHi, `"user":7`), wantParam: "user"},
		{name: "metadata wrong type", give: withMsg(userHi, `"metadata":{"a":1}`), wantParam: "metadata"},
		{name: "tools not array", give: withMsg(userHi, `"tools":{}`), wantParam: "tools"},
		{name: "tool bad type", give: withMsg(userHi, `"tools":[{"type":"code_interpreter"}]`), wantParam: "tools[0].type"},
		{name: "tool no name", give: withMsg(userHi, `"tools":[{"type":"function","function":{"description":"x"}}]`), wantParam: "tools[0].function.name"},
		{name: "tool duplicate", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}]`),
			wantParam: "tools[1].function.name"},
		{name: "tool parameters array", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f","parameters":[]}}]`),
			wantParam: "tools[0].function.parameters"},
		{name: "tool_choice unknown", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"always"`),
			wantParam: "tool_choice"},
		{name: "tool_choice missing tool", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}`),
			wantParam: "tool_choice"},
		{name: "tool_choice required without tools", give: withMsg(userHi, `"tool_choice":"required"`), wantParam: "tool_choice"},
		{name: "tool_choice no name", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function"}`),
			wantParam: "tool_choice.function.name"},
		{name: "tool_choice bad type", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"allowed_tools"}`),
			wantParam: "tool_choice.type"},
		{name: "tool_choice number", give: withMsg(userHi, `"tool_choice":1`), wantParam: "tool_choice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chat := &chattest.Source{Events: chattest.TextEvents("x")}
			rec := serve(newTestHandler(t, chat, Config{}), tt.give)
			if rec.Code != http.StatusBadRequest {
				t.Fatalf("got status %d (%s), want 400", rec.Code, rec.Body)
			}
			e := decodeErrorBody(t, rec)
			param := ""
			if e.Param != nil {
				param = *e.Param
			}
			if param != tt.wantParam || e.Type != openaierr.TypeInvalidRequest {
				t.Errorf("got param %q type %q (%s), want param %q type %q", param, e.Type, e.Message, tt.wantParam, openaierr.TypeInvalidRequest)
			}
			if n := len(chat.Requests()); n != 0 {
				t.Errorf("got %d calls to the router, want 0", n)
			}
		})
	}
}

func TestAccepted(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{name: "minimal", give: withMsg(userHi, "")},
		{name: "no model", give: `{"messages":[` + userHi + `]}`},
		{name: "ignored extras", give: withMsg(userHi, `"seed":1,"user":"u","service_tier":"auto","store":false,"metadata":{"k":"v"},"parallel_tool_calls":true,"frequency_penalty":0.5,"presence_penalty":-1`)},
		{name: "unknown fields", give: withMsg(userHi, `"reasoning_effort":"low","x_vendor":{"a":[1]}`)},
		{name: "json_object format", give: withMsg(userHi, `"response_format":{"type":"json_object"}`)},
		{name: "loose json_schema", give: withMsg(userHi, `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}`)},
		{name: "n 1 and logprobs false", give: withMsg(userHi, `"n":1,"logprobs":false,"top_logprobs":null,"audio":null,"modalities":["text"]`)},
		{name: "stop string", give: withMsg(userHi, `"stop":"\n\n"`)},
		{name: "stop array", give: withMsg(userHi, `"stop":["a","b","c","d"]`)},
		{name: "max tokens zero", give: withMsg(userHi, `"max_tokens":0`)},
		{name: "assistant null content", give: withMsg(userHi+`,{"role":"assistant","content":null}`, "")},
		{name: "system text parts", give: withMsg(`{"role":"system","content":[{"type":"text","text":"s"}]},`+userHi, "")},
		{name: "tool_choice none no tools", give: withMsg(userHi, `"tool_choice":"none"`)},
		{name: "tool_choice auto", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"`)},
		{name: "tool_choice required", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"`)},
		{name: "tool params null", give: withMsg(userHi, `"tools":[{"type":"function","function":{"name":"f","parameters":null}}]`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chat := &chattest.Source{Events: chattest.TextEvents("x")}
			rec := serve(newTestHandler(t, chat, Config{}), tt.give)
			if rec.Code != http.StatusOK {
				t.Errorf("got status %d (%s), want 200", rec.Code, rec.Body)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		withMsg(userHi, ""),
		withMsg(userHi, `"stream":true,"stop":["a"],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"`),
		withMsg(`{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"1","content":"r"}`, ""),
		`{"messages":null}`, `[]`, `null`, `{"messages":[{"content":[null]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _, err := decodeRequest(body)
		if err == nil && len(req.Messages) == 0 {
			t.Fatalf("accepted %q with no messages", body)
		}
		if err != nil {
			if p := apierr.Classify(err); p.Status != http.StatusBadRequest {
				t.Fatalf("decode error %v maps to %d, want 400", err, p.Status)
			}
		}
	})
}

// response_format's JSON modes ask the worker for a JSON answer, with the
// schema when json_schema names one.
func TestResponseFormat(t *testing.T) {
	tests := []struct {
		name string
		give string
		want chat.Format
	}{
		{"none", "", chat.Format{}},
		{"text", `"response_format":{"type":"text"}`, chat.Format{}},
		{"json_object", `"response_format":{"type":"json_object"}`, chat.Format{JSON: true}},
		{"json_schema", `"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}`,
			chat.Format{JSON: true, Schema: json.RawMessage(`{"type":"object"}`)}},
		{"json_schema without schema", `"response_format":{"type":"json_schema","json_schema":{"name":"x"}}`, chat.Format{JSON: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _, err := decodeRequest([]byte(withMsg(userHi, tt.give)))
			if err != nil {
				t.Fatal(err)
			}
			if req.Format.JSON != tt.want.JSON || string(req.Format.Schema) != string(tt.want.Schema) {
				t.Errorf("format %+v, want %+v", req.Format, tt.want)
			}
		})
	}
}
