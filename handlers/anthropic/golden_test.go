package anthropic_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// volatile matches the random ids in a transcript.
var volatile = regexp.MustCompile(`\b(msg|toolu)_[A-Z2-7]{26}\b`)

// messages returns the messages route of a handler with cfg, answered by p.
func messages(cfg anthropic.Config, p relaytest.Source) http.HandlerFunc {
	return relaytest.Serve(anthropic.New(cfg, nil), p)
}

const streamBody = `{"model":"claude-x","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"hi"}]}`

func TestGoldenStreams(t *testing.T) {
	text := func(s string) chat.Event { return chat.Event{Type: chat.EventText, Text: s} }
	tests := []struct {
		name  string
		give  []chat.Event
		giveE error
	}{
		{name: "text", give: chattest.TextEvents("Hel", "lo \"wo", "rld\"\n")},
		{name: "tool_use", give: []chat.Event{
			text("Checking."),
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{Name: "get_time", Arguments: ``}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
		}},
		{name: "max_tokens", give: []chat.Event{
			text("Once upon"),
			{Type: chat.EventDone, Finish: chat.FinishLength, Usage: chat.Usage{InputTokens: 5, OutputTokens: 50}},
		}},
		{name: "stop_sequence", give: []chat.Event{
			text("1, 2, "),
			{Type: chat.EventDone, Finish: chat.FinishStopSequence, StopSequence: "3", Usage: chat.Usage{InputTokens: 5, OutputTokens: 3}},
		}},
		{name: "fails_half_way", give: []chat.Event{
			text("Half an "),
			{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "worker crashed"}},
		}},
		{name: "rate_limited_half_way", give: []chat.Event{
			text("Half"),
			{Type: chat.EventError, Err: &chat.RateLimitedError{Message: "quota"}},
		}},
		{name: "ends_without_done", give: []chat.Event{text("cut")}},
		{name: "empty_answer", give: chattest.TextEvents()},
		{name: "error_before_first_event", giveE: chat.ErrNoInstance},
		{name: "error_as_first_event", give: []chat.Event{{Type: chat.EventError, Err: &chat.OverloadedError{Reason: "queue full", RetryAfter: 1500e6}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := messages(anthropic.Config{}, &chattest.Source{Events: tt.give, Err: tt.giveE})
			relaytest.Golden(t, "stream_"+tt.name, relaytest.Transcript(h, "/v1/messages", streamBody), volatile, "${1}_X")
		})
	}
}

func TestGoldenNonStream(t *testing.T) {
	h := messages(anthropic.Config{}, &chattest.Source{Events: []chat.Event{
		{Type: chat.EventText, Text: "Let me look."},
		{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
		{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
	}})
	body := `{"model":"claude-x","max_tokens":50,"messages":[{"role":"user","content":"weather?"}],` +
		`"tools":[{"name":"get_weather","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"}}`
	relaytest.Golden(t, "nonstream_tool_use", relaytest.Transcript(h, "/v1/messages", body), volatile, "${1}_X")
}

func TestValidationErrors(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	tests := []struct {
		name       string
		give       string
		wantStatus int
		wantInMsg  string
	}{
		{"bad json", `{"model":`, 400, "invalid JSON"},
		{"no model", `{"max_tokens":5,` + msgs + `}`, 400, "model"},
		{"no max_tokens", `{"model":"m",` + msgs + `}`, 400, "max_tokens"},
		{"zero max_tokens", `{"model":"m","max_tokens":0,` + msgs + `}`, 400, "max_tokens"},
		{"no messages", `{"model":"m","max_tokens":5,"messages":[]}`, 400, "messages"},
		{"temperature", `{"model":"m","max_tokens":5,"temperature":1.5,` + msgs + `}`, 400, "temperature"},
		{"top_p", `{"model":"m","max_tokens":5,"top_p":-1,` + msgs + `}`, 400, "top_p"},
		{"top_k", `{"model":"m","max_tokens":5,"top_k":-1,` + msgs + `}`, 400, "top_k"},
		{"blank stop", `{"model":"m","max_tokens":5,"stop_sequences":[" "],` + msgs + `}`, 400, "stop_sequences.0"},
		{"too many stops", `{"model":"m","max_tokens":5,"stop_sequences":["a"` + strings.Repeat(`,"a"`, 32) + `],` + msgs + `}`, 400, "at most 32"},
		{"long stop", `{"model":"m","max_tokens":5,"stop_sequences":["` + strings.Repeat("x", 513) + `"],` + msgs + `}`, 400, "stop_sequences.0"},
		{"bad role", `{"model":"m","max_tokens":5,"messages":[{"role":"tool","content":"x"}]}`, 400, "messages.0.role"},
		{"image alone", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, 400, "only images"},
		{"document alone after history", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},` +
			`{"role":"user","content":[{"type":"document","source":{}},{"type":"text","text":" "}]},{"role":"system","content":"env"}]}`, 400, "messages.2: this turn is only images"},
		{"unknown block", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, "hologram"},
		{"system image", `{"model":"m","max_tokens":5,"system":[{"type":"image"}],` + msgs + `}`, 400, "system.0"},
		{"forced server tool", `{"model":"m","max_tokens":5,"tools":[{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"tool","name":"web_search"},` + msgs + `}`, 400, "web_search_20250305"},
		{"duplicate tool", `{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}],` + msgs + `}`, 400, "duplicate"},
		{"prefill before system", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"system","content":"s"}]}`, 400, "prefill"},
		{"tool without schema", `{"model":"m","max_tokens":5,"tools":[{"name":"f"}],` + msgs + `}`, 400, "input_schema"},
		{"tool_choice unknown", `{"model":"m","max_tokens":5,"tool_choice":{"type":"tool","name":"f"},` + msgs + `}`, 400, "tool_choice.name"},
		{"tool_choice bad type", `{"model":"m","max_tokens":5,"tool_choice":{"type":"maybe"},` + msgs + `}`, 400, "tool_choice.type"},
		{"prefill", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`, 400, "prefill"},
		{"mcp", `{"model":"m","max_tokens":5,"mcp_servers":[{"type":"url"}],` + msgs + `}`, 400, "mcp_servers"},
	}
	h := messages(anthropic.Config{}, &chattest.Source{Events: chattest.TextEvents("ok")})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(tt.give)))
			var body struct {
				Type  string
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body.String(), err)
			}
			if rec.Code != tt.wantStatus || body.Type != "error" || body.Error.Type != "invalid_request_error" || !strings.Contains(body.Error.Message, tt.wantInMsg) {
				t.Errorf("got %d %s, want %d invalid_request_error mentioning %q", rec.Code, rec.Body.String(), tt.wantStatus, tt.wantInMsg)
			}
		})
	}
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		give       error
		wantStatus int
		wantType   string
	}{
		{chat.ErrNoInstance, 529, "overloaded_error"},
		{chat.ErrNotLoggedIn, 529, "overloaded_error"},
		{&chat.OverloadedError{Reason: "full"}, 429, "rate_limit_error"},
		{&chat.RateLimitedError{Message: "quota"}, 429, "rate_limit_error"},
		{&chat.UpstreamError{Message: "bad"}, 502, "api_error"},
		{chat.ErrWorkerGone, 502, "api_error"},
	}
	for _, tt := range tests {
		h := messages(anthropic.Config{}, &chattest.Source{Err: tt.give})
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)))
		if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), `"type":"`+tt.wantType+`"`) {
			t.Errorf("%v: got %d %s, want %d %s", tt.give, rec.Code, rec.Body.String(), tt.wantStatus, tt.wantType)
		}
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	anthropic.WriteError(rec, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
	want := `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`
	if rec.Code != 401 || rec.Body.String() != want || rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("got %d %s, want 401 %s", rec.Code, rec.Body.String(), want)
	}
}
