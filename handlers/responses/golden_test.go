package responses_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// volatile matches the random ids and the clock in a transcript.
var volatile = regexp.MustCompile(`\b(resp|msg|fc|fco|call)_[a-z2-7]{26}\b|"created_at":\d+`)

func normalize(s string) string {
	return volatile.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(m, `"created_at"`) {
			return `"created_at":0`
		}
		return m[:strings.IndexByte(m, '_')] + "_X"
	})
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	testenv.Golden(t, name, []byte(got))
}

// handler is a Responses handler whose Create is served as the edge serves
// it, answered by its pool; its other routes are the handler's own.
type handler struct {
	*rsp.Handler
	pool relaytest.Source
}

func newHandler(cfg rsp.Config, p relaytest.Source, store rsp.Store) handler {
	return handler{Handler: rsp.New(cfg, store, nil), pool: p}
}

// Create reads the body and hands the request to the handler's Create.
func (h handler) Create(w http.ResponseWriter, r *http.Request) {
	relaytest.Serve(h.Handler, h.pool)(w, r)
}

// record runs one create request and returns status, content type and body.
func record(t *testing.T, h handler, body string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
	req = req.WithContext(httpx.WithRequestID(req.Context(), "req-1"))
	rec := httptest.NewRecorder()
	h.Create(rec, req)
	return normalize(testenv.Transcript(rec))
}

func TestGoldenStreams(t *testing.T) {
	text := func(s string) chat.Event { return chat.Event{Type: chat.EventText, Text: s} }
	tests := []struct {
		name   string
		give   []chat.Event
		giveFn error
		body   string
	}{
		{name: "text", give: chattest.TextEvents("Hel", "lo \"wo", "rld\"\n")},
		{name: "tool_call", give: []chat.Event{
			text("Checking."),
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
		}, body: `{"model":"m","input":"weather?","stream":true,"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`},
		{name: "max_output_tokens", give: []chat.Event{
			text("Once upon"),
			{Type: chat.EventDone, Finish: chat.FinishLength, Usage: chat.Usage{InputTokens: 5, OutputTokens: 2}},
		}, body: `{"model":"m","input":"story","stream":true,"max_output_tokens":2}`},
		{name: "fails_half_way", give: []chat.Event{
			text("Half an "),
			{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "worker crashed"}},
		}},
		{name: "ends_without_done", give: []chat.Event{text("cut")}},
		{name: "empty_answer", give: chattest.TextEvents()},
		{name: "error_before_first_event", giveFn: chat.ErrNoInstance},
		{name: "error_as_first_event", give: []chat.Event{{Type: chat.EventError, Err: &chat.OverloadedError{Reason: "queue full", RetryAfter: 2e9}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chat := &chattest.Source{Events: tt.give, Err: tt.giveFn}
			h := newHandler(rsp.Config{}, chat, newStore())
			body := tt.body
			if body == "" {
				body = `{"model":"m","input":"hi","stream":true}`
			}
			checkGolden(t, "stream_"+tt.name, record(t, h, body))
		})
	}
}

func TestGoldenNonStream(t *testing.T) {
	chat := &chattest.Source{Events: []chat.Event{
		{Type: chat.EventText, Text: "Let me look."},
		{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
		{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 30, OutputTokens: 9}},
	}}
	h := newHandler(rsp.Config{}, chat, newStore())
	body := `{"model":"m","input":[{"role":"developer","content":"be brief"},{"role":"user","content":[{"type":"input_text","text":"weather?"}]}],` +
		`"instructions":"You help.","metadata":{"k":"v"},"temperature":0.5,"tool_choice":"required",` +
		`"tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`
	checkGolden(t, "nonstream_tool_call", record(t, h, body))
}

func TestStreamFailureIsStored(t *testing.T) {
	store := newStore()
	chat := &chattest.Source{Events: []chat.Event{
		{Type: chat.EventText, Text: "Half"},
		{Type: chat.EventError, Err: errors.New("boom")},
	}}
	h := newHandler(rsp.Config{}, chat, store)
	record(t, h, `{"model":"m","input":"hi","stream":true}`)
	if store.Saves() != 1 {
		t.Errorf("saves = %d, want 1 (a failed response is retrievable)", store.Saves())
	}
}
