package responses_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

type errorBody struct {
	Error map[string]any `json:"error"`
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantStatus int
		wantParam  any // nil for JSON null
	}{
		{"bad json", `{"model":`, 400, nil},
		{"wrong type", `{"model":"m","input":"hi","temperature":"hot"}`, 400, "temperature"},
		{"no model", `{"input":"hi"}`, 400, "model"},
		{"no input", `{"model":"m"}`, 400, "input"},
		{"empty input list", `{"model":"m","input":[]}`, 400, "input"},
		{"background", `{"model":"m","input":"hi","background":true}`, 400, "background"},
		{"include logprobs", `{"model":"m","input":"hi","include":["message.output_text.logprobs"]}`, 400, "include"},
		{"json schema", `{"model":"m","input":"hi","text":{"format":{"type":"json_schema","name":"x","schema":{},"strict":true}}}`, 400, "text.format"},
		{"conversation", `{"model":"m","input":"hi","conversation":"conv_1"}`, 400, "conversation"},
		{"prompt template", `{"model":"m","input":"hi","prompt":{"id":"pmpt_1"}}`, 400, "prompt"},
		{"top_logprobs", `{"model":"m","input":"hi","top_logprobs":3}`, 400, "top_logprobs"},
		{"max_output_tokens 0", `{"model":"m","input":"hi","max_output_tokens":0}`, 400, "max_output_tokens"},
		{"temperature high", `{"model":"m","input":"hi","temperature":2.5}`, 400, "temperature"},
		{"top_p high", `{"model":"m","input":"hi","top_p":1.5}`, 400, "top_p"},
		{"metadata long", `{"model":"m","input":"hi","metadata":{"k":"` + strings.Repeat("v", 513) + `"}}`, 400, "metadata"},
		{"forced web search", `{"model":"m","input":"hi","tools":[{"type":"web_search"}],"tool_choice":{"type":"web_search"}}`, 400, "tool_choice"},
		{"unknown tool type", `{"model":"m","input":"hi","tools":[{"type":"hologram"}]}`, 400, "tools[0].type"},
		{"duplicate tool", `{"model":"m","input":"hi","tools":[{"type":"function","name":"f"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"g"}]},{"type":"function","name":"f"}]}`, 400, "tools[2].name"},
		{"required without tools", `{"model":"m","input":"hi","tool_choice":"required"}`, 400, "tool_choice"},
		{"unnamed function", `{"model":"m","input":"hi","tools":[{"type":"function"}]}`, 400, "tools[0].name"},
		{"tool_choice unknown fn", `{"model":"m","input":"hi","tool_choice":{"type":"function","name":"x"}}`, 400, "tool_choice"},
		{"tool_choice hosted", `{"model":"m","input":"hi","tool_choice":{"type":"file_search"}}`, 400, "tool_choice"},
		{"tool_choice bad string", `{"model":"m","input":"hi","tool_choice":"sometimes"}`, 400, "tool_choice"},
		{"image alone", `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:x"}]}]}`, 400, "input[0].content"},
		{"audio part", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_audio"}]}]}`, 400, "input[0].content[1]"},
		{"bad role", `{"model":"m","input":[{"role":"robot","content":"x"}]}`, 400, "input[0].role"},
		{"unknown item", `{"model":"m","input":[{"type":"item_reference","id":"x"}]}`, 400, "input[0]"},
		{"output without call_id", `{"model":"m","input":[{"type":"function_call_output","output":"x"}]}`, 400, "input[0].call_id"},
		{"unknown previous", `{"input":"hi","previous_response_id":"resp_nope"}`, 404, "previous_response_id"},
	}
	h := newHandler(rsp.Config{}, &chattest.Source{Events: chattest.TextEvents("ok")}, newStore())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(tt.give)))
			var body errorBody
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if rec.Code != tt.wantStatus || body.Error["param"] != tt.wantParam {
				t.Errorf("status %d param %v, want %d %v (body %s)", rec.Code, body.Error["param"], tt.wantStatus, tt.wantParam, rec.Body.String())
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, ok := body.Error[k]; !ok {
					t.Errorf("error body %s lacks %q", rec.Body.String(), k)
				}
			}
			// An id that names nothing is a 404 not_found_error, as every
			// 404 of the gateway is; everything else is the caller's mistake.
			wantType := "invalid_request_error"
			if tt.wantStatus == http.StatusNotFound {
				wantType = "not_found_error"
			}
			if body.Error["type"] != wantType {
				t.Errorf("type = %v, want %s", body.Error["type"], wantType)
			}
		})
	}
}

func TestHarmlessFieldsAccepted(t *testing.T) {
	give := `{"model":"m","input":[{"type":"reasoning","id":"rs_1","summary":[]},{"role":"user","content":"hi"}],` +
		`"user":"u1","parallel_tool_calls":false,"service_tier":"auto","truncation":"auto","reasoning":{"effort":"high"},` +
		`"include":["reasoning.encrypted_content"],"store":false,"prompt_cache_key":"conv-9","text":{"format":{"type":"text"},"verbosity":"low"}}`
	chat := &chattest.Source{Events: chattest.TextEvents("ok")}
	store := newStore()
	h := newHandler(rsp.Config{}, chat, store)
	rec := httptest.NewRecorder()
	h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(give)))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d body %s, want 200", rec.Code, rec.Body.String())
	}
	if store.Saves() != 0 {
		t.Errorf("store:false saved %d times, want 0", store.Saves())
	}
	if got := chat.Requests()[0].AffinityHint; got != "conv-9" {
		t.Errorf("affinity hint = %q, want prompt_cache_key %q", got, "conv-9")
	}
}

func TestInputItemsPagination(t *testing.T) {
	h := newHandler(rsp.Config{}, &chattest.Source{Events: chattest.TextEvents("ok")}, newStore())
	srv := newServer(t, h)
	body := `{"model":"m","input":[{"role":"user","content":"a","id":"msg_a"},{"role":"assistant","content":"b","id":"msg_b"},{"role":"user","content":"c","id":"msg_c"}]}`
	resp, err := http.Post(srv.URL+"/v1/responses", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var created struct{ ID string }
	_ = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	tests := []struct {
		give string
		want string
	}{
		{"", `"data":[msg_c,msg_b,msg_a] first=msg_c last=msg_a more=false`},
		{"?order=asc&limit=2", `"data":[msg_a,msg_b] first=msg_a last=msg_b more=true`},
		{"?order=asc&limit=2&after=msg_b", `"data":[msg_c] first=msg_c last=msg_c more=false`},
	}
	for _, tt := range tests {
		got := listSummary(t, srv.URL+"/v1/responses/"+created.ID+"/input_items"+tt.give)
		if got != tt.want {
			t.Errorf("%q: got %s, want %s", tt.give, got, tt.want)
		}
	}
}

func listSummary(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object  string `json:"object"`
		Data    []struct{ ID string }
		FirstID string `json:"first_id"`
		LastID  string `json:"last_id"`
		HasMore bool   `json:"has_more"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || list.Object != "list" {
		t.Fatalf("decode list (object %q): %v", list.Object, err)
	}
	ids := make([]string, len(list.Data))
	for i, d := range list.Data {
		ids[i] = d.ID
	}
	more := "false"
	if list.HasMore {
		more = "true"
	}
	return `"data":[` + strings.Join(ids, ",") + "] first=" + list.FirstID + " last=" + list.LastID + " more=" + more
}

func TestOtherKeyCannotSeeResponse(t *testing.T) {
	h := newHandler(rsp.Config{}, &chattest.Source{Events: chattest.TextEvents("ok")}, newStore())
	srv := newServer(t, h)
	do := func(method, path, key, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	var created struct{ ID string }
	_ = json.NewDecoder(do("POST", "/v1/responses", "key-a", `{"model":"m","input":"hi"}`).Body).Decode(&created)
	tests := []struct {
		give       string
		wantStatus int
	}{
		{"key-b", http.StatusNotFound},
		{"key-a", http.StatusOK},
	}
	for _, tt := range tests {
		if got := do("GET", "/v1/responses/"+created.ID, tt.give, "").StatusCode; got != tt.wantStatus {
			t.Errorf("GET with %s: status %d, want %d", tt.give, got, tt.wantStatus)
		}
	}
	if got := do("POST", "/v1/responses", "key-b", `{"input":"hi","previous_response_id":"`+created.ID+`"}`).StatusCode; got != http.StatusNotFound {
		t.Errorf("continuing another key's response: status %d, want 404", got)
	}
}
