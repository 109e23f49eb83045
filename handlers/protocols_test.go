package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/session"
)

// protocol runs one request body through one protocol's handler.
type protocol struct {
	name  string
	proto relay.Protocol
	// body is a request with the given extra top-level fields.
	body func(stream bool, extra string) string
}

var protocols = []protocol{
	{"chat", openaichat.New(openaichat.Config{}, nil), func(stream bool, extra string) string {
		return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]%s}`, stream, extra)
	}},
	{"responses", responses.New(responses.Config{}, session.NewMemory(session.MemoryConfig{}), nil), func(stream bool, extra string) string {
		return fmt.Sprintf(`{"model":"m","stream":%v,"input":"hi"%s}`, stream, extra)
	}},
	{"messages", anthropic.New(anthropic.Config{}, nil), func(stream bool, extra string) string {
		return fmt.Sprintf(`{"model":"m","max_tokens":5,"stream":%v,"messages":[{"role":"user","content":"hi"}]%s}`, stream, extra)
	}},
}

func (p protocol) do(fake *chattest.Source, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	relaytest.Serve(p.proto, fake)(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	return rec
}

// wireError is what a client reads of an error: the OpenAI object's type
// and code, or Anthropic's type.
func wireError(t *testing.T, b []byte) string {
	t.Helper()
	var e struct {
		Type  string
		Error struct {
			Type string
			Code *string
		}
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q: %v", b, err)
	}
	if e.Type == "error" { // Anthropic
		return e.Error.Type
	}
	code := "null"
	if e.Error.Code != nil {
		code = *e.Error.Code
	}
	return e.Error.Type + "/" + code
}

// lastData is the payload of a stream's last data line.
func lastData(body string) []byte {
	lines := strings.Split(strings.TrimSpace(body), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if d, ok := strings.CutPrefix(lines[i], "data: "); ok {
			return []byte(d)
		}
	}
	return nil
}

// midStream is how a stream that failed after its first event ends, as a
// client reads it: the OpenAI error chunk's type/code, Responses'
// response.failed code, Anthropic's error event type.
func midStream(t *testing.T, body string) string {
	t.Helper()
	d := lastData(body)
	var failed struct {
		Type     string
		Response struct{ Error struct{ Code string } }
	}
	if json.Unmarshal(d, &failed) == nil && failed.Type == "response.failed" {
		return "failed/" + failed.Response.Error.Code
	}
	return wireError(t, d)
}

// The table of docs/protocol-errors.md: every error the router can end a
// request with, as each protocol tells it before the stream started (status
// and type/code) and after (the stream's failed ending).
func TestErrorsAgreeAcrossProtocols(t *testing.T) {
	type told struct {
		status          int
		chat            string // OpenAI type/code (Responses' too), also of chat's in-stream chunk
		messages        string // Anthropic type
		anthropicStatus int    // when it differs from status
		failed, msgsMid string // Responses' response.failed code, Anthropic's error event type
		retryAfter      string
	}
	tests := []struct {
		give error
		want told
	}{
		{chat.ErrNoInstance, told{status: 503, chat: "server_error/no_instance", messages: "overloaded_error", anthropicStatus: 529,
			failed: "server_error", msgsMid: "overloaded_error"}},
		{chat.ErrNotLoggedIn, told{status: 503, chat: "server_error/not_logged_in", messages: "overloaded_error", anthropicStatus: 529,
			failed: "server_error", msgsMid: "overloaded_error"}},
		{&chat.OverloadedError{RetryAfter: 1500 * time.Millisecond}, told{status: 429, chat: "rate_limit_error/overloaded", messages: "rate_limit_error",
			failed: "rate_limit_exceeded", msgsMid: "overloaded_error", retryAfter: "2"}},
		{&chat.RateLimitedError{Message: "quota", RetryAfter: 30 * time.Second}, told{status: 429, chat: "rate_limit_error/rate_limit_exceeded",
			messages: "rate_limit_error", failed: "rate_limit_exceeded", msgsMid: "overloaded_error", retryAfter: "30"}},
		{&chat.UpstreamError{Status: 500, Message: "crashed"}, told{status: 502, chat: "server_error/upstream_error", messages: "api_error",
			failed: "server_error", msgsMid: "api_error"}},
		{chat.ErrWorkerGone, told{status: 502, chat: "server_error/worker_gone", messages: "api_error", failed: "server_error", msgsMid: "api_error"}},
		{&chat.PolicyError{Message: "tool x is not allowed", Param: "tool_choice"}, told{status: 400, chat: "invalid_request_error/tool_not_allowed",
			messages: "invalid_request_error", failed: "server_error", msgsMid: "api_error"}},
		{context.DeadlineExceeded, told{status: 504, chat: "server_error/timeout", messages: "api_error", failed: "server_error", msgsMid: "api_error"}},
		{context.Canceled, told{status: 499, chat: "invalid_request_error/canceled", messages: "invalid_request_error", failed: "server_error", msgsMid: "api_error"}},
		{errors.New("something unexpected"), told{status: 500, chat: "server_error/null", messages: "api_error", failed: "server_error", msgsMid: "api_error"}},
	}
	for _, tt := range tests {
		for _, p := range protocols {
			t.Run(fmt.Sprintf("%v/%s", tt.give, p.name), func(t *testing.T) {
				want := tt.want
				wantStatus, wantType, wantMid := want.status, want.chat, want.chat
				switch p.name {
				case "responses":
					wantMid = "failed/" + want.failed
				case "messages":
					wantType, wantMid = want.messages, want.msgsMid
					if want.anthropicStatus != 0 {
						wantStatus = want.anthropicStatus
					}
				}
				rec := p.do(&chattest.Source{Err: tt.give}, p.body(false, ""))
				if got := wireError(t, rec.Body.Bytes()); rec.Code != wantStatus || got != wantType || rec.Header().Get("Retry-After") != want.retryAfter {
					t.Errorf("before the stream: got %d %s Retry-After %q, want %d %s Retry-After %q",
						rec.Code, got, rec.Header().Get("Retry-After"), wantStatus, wantType, want.retryAfter)
				}
				rec = p.do(&chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventError, Err: tt.give}}}, p.body(true, ""))
				if got := midStream(t, rec.Body.String()); rec.Code != http.StatusOK || got != wantMid {
					t.Errorf("mid-stream: got %d %s, want 200 %s", rec.Code, got, wantMid)
				}
			})
		}
	}
}

// The semantic checks are chat.Validate's, so the protocols accept and
// refuse the same requests, each naming the field its own way.
func TestValidationAgreesAcrossProtocols(t *testing.T) {
	tool := map[string]string{
		"chat":      `{"type":"function","function":{"name":"%s","parameters":{"type":"object"}}}`,
		"responses": `{"type":"function","name":"%s","parameters":{"type":"object"}}`,
		"messages":  `{"name":"%s","input_schema":{"type":"object"}}`,
	}
	tools := func(p string, names ...string) string {
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf(tool[p], n))
		}
		return `,"tools":[` + strings.Join(parts, ",") + `]`
	}
	choice := map[string]map[string]string{
		"auto":     {"chat": `"auto"`, "responses": `"auto"`, "messages": `{"type":"auto"}`},
		"none":     {"chat": `"none"`, "responses": `"none"`, "messages": `{"type":"none"}`},
		"required": {"chat": `"required"`, "responses": `"required"`, "messages": `{"type":"any"}`},
		"named g":  {"chat": `{"type":"function","function":{"name":"g"}}`, "responses": `{"type":"function","name":"g"}`, "messages": `{"type":"tool","name":"g"}`},
	}
	many := func(p string, n int) string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprint("t", i)
		}
		return tools(p, names...)
	}
	tests := []struct {
		name       string
		extra      func(p string) string
		wantStatus int
		wantParam  map[string]string // OpenAI param, or the start of Anthropic's message
	}{
		{"auto without tools", func(p string) string { return `,"tool_choice":` + choice["auto"][p] }, 200, nil},
		{"none without tools", func(p string) string { return `,"tool_choice":` + choice["none"][p] }, 200, nil},
		{"required with a tool", func(p string) string { return tools(p, "f") + `,"tool_choice":` + choice["required"][p] }, 200, nil},
		{"required without tools", func(p string) string { return `,"tool_choice":` + choice["required"][p] }, 400,
			map[string]string{"chat": "tool_choice", "responses": "tool_choice", "messages": "tool_choice:"}},
		{"named tool not offered", func(p string) string { return tools(p, "f") + `,"tool_choice":` + choice["named g"][p] }, 400,
			map[string]string{"chat": "tool_choice", "responses": "tool_choice", "messages": "tool_choice.name:"}},
		{"duplicate tool names", func(p string) string { return tools(p, "f", "g", "f") }, 400,
			map[string]string{"chat": "tools[2].function.name", "responses": "tools[2].name", "messages": "tools.2.name:"}},
		{"as many tools as allowed", func(p string) string { return many(p, chat.MaxTools) }, 200, nil},
		{"too many tools", func(p string) string { return many(p, chat.MaxTools+1) }, 400,
			map[string]string{"chat": "tools", "responses": "tools", "messages": "tools:"}},
		{"top_p over 1", func(string) string { return `,"top_p":1.5` }, 400,
			map[string]string{"chat": "top_p", "responses": "top_p", "messages": "top_p:"}},
	}
	for _, tt := range tests {
		for _, p := range protocols {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				fake := &chattest.Source{Events: chattest.TextEvents("ok")}
				rec := p.do(fake, p.body(false, tt.extra(p.name)))
				if rec.Code != tt.wantStatus {
					t.Fatalf("got %d %s, want %d", rec.Code, rec.Body, tt.wantStatus)
				}
				if tt.wantStatus == 200 {
					return
				}
				var e struct {
					Error struct {
						Type, Message string
						Param         *string
					}
				}
				_ = json.Unmarshal(rec.Body.Bytes(), &e)
				want := tt.wantParam[p.name]
				switch {
				case e.Error.Type != "invalid_request_error":
					t.Errorf("type %q, want invalid_request_error (%s)", e.Error.Type, rec.Body)
				case p.name == "messages" && !strings.HasPrefix(e.Error.Message, want):
					t.Errorf("message %q, want it to start with %q", e.Error.Message, want)
				case p.name != "messages" && (e.Error.Param == nil || *e.Error.Param != want):
					t.Errorf("param %v, want %q (%s)", e.Error.Param, want, rec.Body)
				}
				if n := len(fake.Requests()); n != 0 {
					t.Errorf("the router was called %d times, want 0", n)
				}
			})
		}
	}
}
