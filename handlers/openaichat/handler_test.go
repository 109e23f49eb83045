package openaichat

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// newTestHandler returns the completions route answered by p, with a fixed
// clock and counting ids, so transcripts are stable.
func newTestHandler(t *testing.T, p relaytest.Source, cfg Config) http.HandlerFunc {
	t.Helper()
	h := New(cfg, nil)
	h.now = func() time.Time { return time.Unix(1700000000, 0) }
	var n atomic.Int64
	h.newID = func(prefix string) string { return fmt.Sprintf("%stest%d", prefix, n.Add(1)) }
	return relaytest.Serve(h, p)
}

// serve runs one request through h the way the gin middleware would.
func serve(h http.HandlerFunc, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	ctx := httpx.WithRequestID(r.Context(), "req-1")
	ctx = access.WithCaller(ctx, access.Caller{Key: &apikey.Key{Secret: "sk-test"}})
	rec := httptest.NewRecorder()
	h(rec, r.WithContext(ctx))
	return rec
}

// transcript renders a response for a golden file: status, the headers a
// client cares about, then the body verbatim.
func transcript(rec *httptest.ResponseRecorder) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "status: %d\n", rec.Code)
	for _, k := range []string{"Content-Type", "Cache-Control", "Retry-After"} {
		if v := rec.Header().Get(k); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	b.WriteString("\n")
	b.Write(rec.Body.Bytes())
	return b.Bytes()
}

const (
	simpleBody = `{"model":"qwen","messages":[{"role":"user","content":"hi"}]}`
	streamBody = `{"model":"qwen","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	usageBody  = `{"model":"qwen","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
)

func toolAnswer() []chat.Event {
	return []chat.Event{
		{Type: chat.EventText, Text: "Let me check."},
		{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_a", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
		{Type: chat.EventToolCall, ToolCall: chat.ToolCall{Name: "get_time", Arguments: `{"tz":"CET"}`}},
		{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 20, OutputTokens: 12}},
	}
}

func failingAnswer() []chat.Event {
	return []chat.Event{
		{Type: chat.EventText, Text: "Half an "},
		{Type: chat.EventText, Text: "answer"},
		{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "model crashed"}},
	}
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		events []chat.Event
		err    error
	}{
		{name: "stream_text", body: streamBody, events: chattest.TextEvents("Hello", ", \"world\"\n", "日本")},
		{name: "stream_usage", body: usageBody, events: chattest.TextEvents("Hello", " there")},
		{name: "stream_tool_calls", body: usageBody, events: toolAnswer()},
		{name: "stream_stop_sequence", body: streamBody, events: []chat.Event{
			{Type: chat.EventText, Text: "one two"},
			{Type: chat.EventDone, Finish: chat.FinishStopSequence, StopSequence: "three"}}},
		{name: "stream_length", body: streamBody, events: []chat.Event{
			{Type: chat.EventText, Text: "cut"},
			{Type: chat.EventDone, Finish: chat.FinishLength}}},
		{name: "stream_fails_midway", body: usageBody, events: failingAnswer()},
		{name: "stream_fails_before_first_event", body: streamBody, events: []chat.Event{
			{Type: chat.EventError, Err: chat.ErrWorkerGone}}},
		{name: "stream_overloaded", body: streamBody, err: &chat.OverloadedError{RetryAfter: 1500 * time.Millisecond, Reason: "queue full"}},
		{name: "json_text", body: simpleBody, events: chattest.TextEvents("Hello", " there")},
		{name: "json_tool_calls", body: simpleBody, events: toolAnswer()},
		{name: "json_fails", body: simpleBody, events: failingAnswer()},
		{name: "json_no_instance", body: simpleBody, err: chat.ErrNoInstance},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &chattest.Source{Events: tt.events, Err: tt.err}
			rec := serve(newTestHandler(t, fake, Config{}), tt.body)
			testenv.Golden(t, tt.name, transcript(rec))
		})
	}
}

func TestRequestMapping(t *testing.T) {
	body := `{
		"model": "qwen-max", "user": "conv-7", "stream": true, "max_tokens": 50, "max_completion_tokens": 100,
		"temperature": 0.5, "top_p": 0.9, "stop": "END", "seed": 3, "metadata": {"a": "b"},
		"response_format": {"type": "json_object"}, "parallel_tool_calls": false, "some_vendor_field": {"x": 1},
		"messages": [
			{"role": "developer", "content": "Be brief."},
			{"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "the weather?"}]},
			{"role": "assistant", "content": null, "tool_calls": [
				{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "rainy"}
		],
		"tools": [{"type": "function", "function": {"name": "weather", "description": "Looks it up",
			"parameters": {"type": "object"}}}],
		"tool_choice": {"type": "function", "function": {"name": "weather"}}
	}`
	fake := &chattest.Source{Events: chattest.TextEvents("ok")}
	rec := serve(newTestHandler(t, fake, Config{}), body)
	if rec.Code != http.StatusOK {
		t.Fatalf("got status %d (%s), want 200", rec.Code, rec.Body)
	}
	got := fake.Requests()[0]
	temp, topP := 0.5, 0.9
	want := &chat.Request{
		AffinityHint: "conv-7", // the request id and the key are the edge's to set

		Model: "qwen-max", MaxTokens: 100, Stop: []string{"END"}, Temperature: &temp, TopP: &topP, Stream: true,
		Messages: []chat.Message{
			{Role: chat.RoleSystem, Content: "Be brief."},
			{Role: chat.RoleUser, Content: "What is the weather?"},
			{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Oslo"}`}}},
			{Role: chat.RoleTool, Content: "rainy", ToolCallID: "c1", Name: "weather"},
		},
		Tools:      []chat.Tool{{Name: "weather", Description: "Looks it up", Parameters: []byte(`{"type": "object"}`)}},
		ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "weather"},
		Format:     chat.Format{JSON: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := serve(newTestHandler(t, thinkingPool{40 * time.Second}, Config{Options: relay.Options{KeepAlive: 15 * time.Second}}), streamBody)
		if got, want := strings.Count(rec.Body.String(), ": keep-alive\n\n"), 2; got != want {
			t.Errorf("got %d keep-alives, want %d in\n%s", got, want, rec.Body)
		}
		if !strings.HasSuffix(rec.Body.String(), "data: [DONE]\n\n") {
			t.Errorf("got body\n%s\nwant it to end with [DONE]", rec.Body)
		}
	})
}

// thinkingPool's answers start at once and say "late" after think, like a
// worker thinking before its first token (chattest.Source's Delay holds the
// start instead).
type thinkingPool struct{ think time.Duration }

func (p thinkingPool) Open(ctx context.Context, _ *chat.Request, _ bool) (chat.Answer, string, error) {
	f := chattest.NewFeed(ctx, 2)
	go func() {
		t := time.NewTimer(p.think)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		for _, ev := range chattest.TextEvents("late") {
			if !f.Send(ev) {
				return
			}
		}
	}()
	return f, "", nil
}

func TestClientDisconnectCancelsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "partial"}}, Hang: true}
		h := newTestHandler(t, fake, Config{})
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(streamBody)).WithContext(ctx)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			h(rec, r)
			close(done)
		}()
		synctest.Wait()
		cancel()
		<-done
		<-fake.Answers()[0].Closed()
		if strings.Contains(rec.Body.String(), "[DONE]") {
			t.Errorf("got [DONE] after a disconnect, want none")
		}
	})
}

// Every error the router can end a request with reaches the client with
// its status, OpenAI type, code and Retry-After.
func TestErrors(t *testing.T) {
	tests := []struct {
		give           error
		wantStatus     int
		wantType       string
		wantCode       string
		wantRetryAfter string
	}{
		{give: chat.ErrNoInstance, wantStatus: 503, wantType: openaierr.TypeServer, wantCode: "no_instance"},
		{give: fmt.Errorf("pick: %w", chat.ErrNotLoggedIn), wantStatus: 503, wantType: openaierr.TypeServer, wantCode: "not_logged_in"},
		{give: &chat.OverloadedError{RetryAfter: 2100 * time.Millisecond}, wantStatus: 429, wantType: openaierr.TypeRateLimit,
			wantCode: "overloaded", wantRetryAfter: "3"},
		{give: &chat.OverloadedError{}, wantStatus: 429, wantType: openaierr.TypeRateLimit, wantCode: "overloaded", wantRetryAfter: "1"},
		{give: &chat.RateLimitedError{Message: "quota"}, wantStatus: 429, wantType: openaierr.TypeRateLimit, wantCode: "rate_limit_exceeded"},
		{give: &chat.RateLimitedError{RetryAfter: time.Minute}, wantStatus: 429, wantType: openaierr.TypeRateLimit,
			wantCode: "rate_limit_exceeded", wantRetryAfter: "60"},
		{give: &chat.UpstreamError{Status: 500, Message: "boom"}, wantStatus: 502, wantType: openaierr.TypeServer, wantCode: "upstream_error"},
		{give: chat.ErrWorkerGone, wantStatus: 502, wantType: openaierr.TypeServer, wantCode: "worker_gone"},
		{give: context.DeadlineExceeded, wantStatus: 504, wantType: openaierr.TypeServer, wantCode: "timeout"},
		{give: httpx.ErrBodyTooLarge, wantStatus: 413, wantType: openaierr.TypeInvalidRequest, wantCode: "request_too_large"},
		{give: fmt.Errorf("surprise"), wantStatus: 500, wantType: openaierr.TypeServer},
	}
	for _, tt := range tests {
		t.Run(tt.give.Error(), func(t *testing.T) {
			rec := serve(newTestHandler(t, &chattest.Source{Err: tt.give}, Config{}), simpleBody)
			e := decodeErrorBody(t, rec)
			code := ""
			if e.Code != nil {
				code = *e.Code
			}
			got := fmt.Sprint(rec.Code, e.Type, code, rec.Header().Get("Retry-After"))
			want := fmt.Sprint(tt.wantStatus, tt.wantType, tt.wantCode, tt.wantRetryAfter)
			if got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

func TestDeadline(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantStatus int
		wantBody   string
	}{
		{name: "stream", give: streamBody, wantStatus: 200, wantBody: `data: {"error":{"message":"the request timed out","type":"server_error","param":null,"code":"timeout"}}`},
		{name: "json", give: simpleBody, wantStatus: 504, wantBody: `"code":"timeout"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newTestHandler(t, &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "partial"}}, Hang: true}, Config{Options: relay.Options{KeepAlive: -1}})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(tt.give)).WithContext(ctx)
				rec := httptest.NewRecorder()
				h(rec, r)
				if rec.Code != tt.wantStatus || !strings.Contains(rec.Body.String(), tt.wantBody) {
					t.Errorf("got %d %s, want %d containing %s", rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
				}
			})
		})
	}
}

// A request that waits for its answer to start gets keep-alive comments,
// which commit the stream: a failure after one is an error chunk; a quick
// failure is still a JSON status.
func TestSlowStartKeepsAlive(t *testing.T) {
	tests := []struct {
		name       string
		give       *chattest.Source
		wantStatus int
		want       []string // in order
		avoid      string
	}{
		{"answer after a wait", &chattest.Source{Delay: 35 * time.Second, Events: chattest.TextEvents("late")}, 200,
			[]string{": keep-alive\n\n", ": keep-alive\n\n", `"content":"late"`, "data: [DONE]\n\n"}, "error"},
		{"overloaded after a wait", &chattest.Source{Delay: 35 * time.Second, Err: &chat.OverloadedError{RetryAfter: time.Second}}, 200,
			[]string{": keep-alive\n\n", `data: {"error":`, "rate_limit_error"}, "[DONE]"},
		{"overloaded at once", &chattest.Source{Err: &chat.OverloadedError{RetryAfter: time.Second}}, 429,
			[]string{`{"error":`}, "keep-alive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := serve(newTestHandler(t, tt.give, Config{Options: relay.Options{KeepAlive: 15 * time.Second}}), streamBody)
				body := rec.Body.String()
				if rec.Code != tt.wantStatus || !testenv.InOrder(body, tt.want) || strings.Contains(body, tt.avoid) {
					t.Errorf("got %d\n%s\nwant %d with %q in order and no %q", rec.Code, body, tt.wantStatus, tt.want, tt.avoid)
				}
			})
		})
	}
}
