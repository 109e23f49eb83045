package gemini_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/gemini"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// volatile matches the random response ids in a transcript.
var volatile = regexp.MustCompile(`"responseId":"[A-Z2-7]{26}"`)

// generate returns the generate route of a handler with cfg, answered by p.
func generate(cfg gemini.Config, p relaytest.Source) http.HandlerFunc {
	return relaytest.Serve(gemini.New(cfg, nil), p)
}

const (
	hello     = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	sseURL    = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
	arrayURL  = "/v1beta/models/gemini-x:streamGenerateContent"
	replyURL  = "/v1beta/models/gemini-x:generateContent"
	countURL  = "/v1beta/models/gemini-x:countTokens"
	weatherFn = `"tools":[{"functionDeclarations":[{"name":"get_weather","parameters":{"type":"OBJECT","properties":{"city":{"type":"STRING"}}}}]}]`
)

func TestGoldenStreams(t *testing.T) {
	text := func(s string) chat.Event { return chat.Event{Type: chat.EventText, Text: s} }
	tests := []struct {
		name  string
		give  []chat.Event
		giveE error
	}{
		{name: "text", give: chattest.TextEvents("Hel", "lo \"wo", "rld\"\n")},
		{name: "function_call", give: []chat.Event{
			text("Checking."),
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{Name: "get_time", Arguments: `not json`}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
		}},
		{name: "max_tokens", give: []chat.Event{
			text("Once upon"),
			{Type: chat.EventDone, Finish: chat.FinishLength, Usage: chat.Usage{InputTokens: 5, OutputTokens: 50}},
		}},
		{name: "fails_half_way", give: []chat.Event{
			text("Half an "),
			{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "worker crashed"}},
		}},
		{name: "rate_limited_half_way", give: []chat.Event{
			text("Half"),
			{Type: chat.EventError, Err: &chat.RateLimitedError{Message: "quota", RetryAfter: 2e9}},
		}},
		{name: "ends_without_done", give: []chat.Event{text("cut")}},
		{name: "empty_answer", give: chattest.TextEvents()},
		{name: "error_before_first_event", giveE: chat.ErrNoInstance},
		{name: "error_as_first_event", give: []chat.Event{{Type: chat.EventError, Err: &chat.OverloadedError{Reason: "queue full", RetryAfter: 1500e6}}}},
	}
	for _, tt := range tests {
		for _, mode := range []struct{ name, url string }{{"sse", sseURL}, {"array", arrayURL}} {
			t.Run(tt.name+"_"+mode.name, func(t *testing.T) {
				h := generate(gemini.Config{}, &chattest.Source{Events: tt.give, Err: tt.giveE})
				relaytest.Golden(t, mode.name+"_"+tt.name, relaytest.Transcript(h, mode.url, hello), volatile, `"responseId":"X"`)
			})
		}
	}
}

func TestGoldenReply(t *testing.T) {
	tests := []struct {
		name string
		give []chat.Event
	}{
		{"function_call", []chat.Event{
			{Type: chat.EventText, Text: "Let me look."},
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
		}},
		{"text", chattest.TextEvents("You said: ", "hi")},
		{"upstream_error", []chat.Event{{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "boom"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := generate(gemini.Config{}, &chattest.Source{Events: tt.give})
			relaytest.Golden(t, "reply_"+tt.name, relaytest.Transcript(h, replyURL, `{"contents":[{"role":"user","parts":[{"text":"weather?"}]}],`+weatherFn+`}`), volatile, `"responseId":"X"`)
		})
	}
}

// A keep-alive is what both Google SDKs skip: a response without parts on
// an event stream (a comment would break them), whitespace in the array.
func TestKeepAlive(t *testing.T) {
	for _, mode := range []struct{ name, url string }{{"sse", sseURL}, {"array", arrayURL}} {
		t.Run(mode.name, func(t *testing.T) {
			h := generate(gemini.Config{Options: relay.Options{KeepAlive: 20e6}}, &chattest.Source{Delay: 90e6, Events: chattest.TextEvents("late")})
			got := relaytest.Transcript(h, mode.url, hello)
			if strings.Contains(got, "\n:") || strings.Contains(got, "event:") {
				t.Errorf("%s stream carries SSE comments or event names:\n%s", mode.name, got)
			}
			if mode.name == "sse" && !strings.Contains(got, `data: {"candidates":[{"content":{"role":"model","parts":[]},"index":0}]`) {
				t.Errorf("no keep-alive response in:\n%s", got)
			}
			if mode.name == "array" && !strings.HasPrefix(got[strings.Index(got, "\n\n")+2:], "[\n") {
				t.Errorf("no keep-alive whitespace after the array's start in:\n%s", got)
			}
		})
	}
}

func TestCountTokens(t *testing.T) {
	h := gemini.New(gemini.Config{}, nil)
	tests := []struct {
		name, give string
		wantStatus int
		want       string
	}{
		{"contents", `{"contents":[{"parts":[{"text":"hello there"}]}]}`, 200, `{"totalTokens":6}`},
		{"whole request", `{"generateContentRequest":{"model":"models/x","contents":[{"parts":[{"text":"hello there"}]}],` +
			`"systemInstruction":{"parts":[{"text":"be brief"}]}}}`, 200, `{"totalTokens":12}`},
		{"both", `{"contents":[{"parts":[{"text":"a"}]}],"generateContentRequest":{"contents":[{"parts":[{"text":"a"}]}]}}`, 400, "mutually exclusive"},
		{"nothing", `{}`, 400, "INVALID_ARGUMENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			relaytest.Count(h, nil)(rec, httptest.NewRequest(http.MethodPost, countURL, strings.NewReader(tt.give)))
			if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.want) {
				t.Errorf("got %d %s, want %d with %s", rec.Code, rec.Body.String(), tt.wantStatus, tt.want)
			}
		})
	}
}

func TestErrorShape(t *testing.T) {
	tests := []struct {
		give       error
		wantStatus int
		wantName   string
		wantRetry  string
	}{
		{&apierr.RequestError{Message: "contents: bad"}, 400, "INVALID_ARGUMENT", ""},
		{chat.ErrNoInstance, 503, "UNAVAILABLE", ""},
		{&chat.OverloadedError{Reason: "full", RetryAfter: 2e9}, 429, "RESOURCE_EXHAUSTED", "2"},
		{&chat.RateLimitedError{Message: "quota", RetryAfter: 3e9}, 429, "RESOURCE_EXHAUSTED", "3"},
		{&chat.UpstreamError{Message: "bad"}, 502, "UNAVAILABLE", ""},
		{chat.ErrWorkerGone, 502, "UNAVAILABLE", ""},
		{context.DeadlineExceeded, 504, "DEADLINE_EXCEEDED", ""},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		p := apierr.Classify(tt.give)
		gemini.WriteProblem(rec, &p)
		var body struct {
			Error struct {
				Code    int
				Message string
				Status  string
				Details []map[string]string
			}
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %q: %v", tt.give, rec.Body, err)
		}
		retry := ""
		if len(body.Error.Details) == 1 && body.Error.Details[0]["@type"] == "type.googleapis.com/google.rpc.RetryInfo" {
			retry = strings.TrimSuffix(body.Error.Details[0]["retryDelay"], "s")
		}
		if rec.Code != tt.wantStatus || body.Error.Code != tt.wantStatus || body.Error.Status != tt.wantName ||
			retry != tt.wantRetry || rec.Header().Get("Retry-After") != tt.wantRetry {
			t.Errorf("%v: got %d %s (Retry-After %q), want %d %s retry %q", tt.give, rec.Code, rec.Body, rec.Header().Get("Retry-After"),
				tt.wantStatus, tt.wantName, tt.wantRetry)
		}
	}
	for status, want := range map[int]string{401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT"} {
		rec := httptest.NewRecorder()
		p := apierr.ForStatus(status, "no")
		gemini.WriteProblem(rec, &p)
		if rec.Code != status || !strings.Contains(rec.Body.String(), `"status":"`+want+`"`) {
			t.Errorf("status %d: got %d %s, want %s", status, rec.Code, rec.Body, want)
		}
	}
}
