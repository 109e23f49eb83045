package modelserver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// parseBody runs the driver's answer reader over body as if a worker had
// sent it with the given content type, and hands every event to emit.
func parseBody(d *Driver, contentType string, body io.Reader, emit func(chat.Event) bool) {
	c := newClient(d, "t", "127.0.0.1:0")
	defer c.conns.close()
	nc, peer := net.Pipe()
	defer peer.Close()
	a := &reader{stream: stream{c: c, ctx: context.Background()}}
	w := &wconn{p: c.conns, nc: nc, body: body}
	a.attach(&http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}}, Body: w}, w)
	for ev, ok := a.Next(); ok && emit(ev); ev, ok = a.Next() {
	}
	a.closeBody()
}

// parsed condenses an answer for comparison.
type parsed struct {
	text   string
	calls  string
	finish chat.FinishReason
	usage  chat.Usage
	err    string
}

var mintedID = regexp.MustCompile(`call_[0-9a-f]{24}`)

func parse(contentType, body string) parsed {
	var p parsed
	parseBody(New(Config{}), contentType, strings.NewReader(body), func(ev chat.Event) bool {
		switch ev.Type {
		case chat.EventText:
			p.text += ev.Text
		case chat.EventToolCall:
			tc := ev.ToolCall
			p.calls += fmt.Sprintf("%s %s %s;", mintedID.ReplaceAllString(tc.ID, "call_<minted>"), tc.Name, tc.Arguments)
		case chat.EventDone:
			p.finish, p.usage = ev.Finish, ev.Usage
		case chat.EventError:
			p.err = ev.Err.Error()
		}
		return true
	})
	return p
}

// sse frames each payload as one event.
func sse(payloads ...string) string {
	var b strings.Builder
	for _, p := range payloads {
		b.WriteString("data: " + p + "\n\n")
	}
	return b.String()
}

const (
	stopChunk = `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	toolStop  = `{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`
)

func text(s string) string {
	return `{"choices":[{"index":0,"delta":{"content":` + fmt.Sprintf("%q", s) + `},"finish_reason":null}]}`
}

func TestParseStream(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	tests := []struct {
		name string
		ct   string // content type; default text/event-stream
		give string
		want parsed
	}{
		{"text and usage after finish", "", sse(text("Hel"), text("lo"), stopChunk,
			`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`, "[DONE]"),
			parsed{text: "Hello", finish: "stop", usage: chat.Usage{InputTokens: 7, OutputTokens: 2}}},
		{"usage input/output tokens", "", sse(text("a"), `{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"input_tokens":3,"output_tokens":1}}`, "[DONE]"),
			parsed{text: "a", finish: "stop", usage: chat.Usage{InputTokens: 3, OutputTokens: 1}}},
		{"usage under x_groq", "", sse(text("a"), `{"choices":[{"delta":{},"finish_reason":"stop"}],"x_groq":{"usage":{"prompt_tokens":5,"completion_tokens":4}}}`, "[DONE]"),
			parsed{text: "a", finish: "stop", usage: chat.Usage{InputTokens: 5, OutputTokens: 4}}},
		{"usage in the choice", "", sse(`{"choices":[{"delta":{"content":"a"},"finish_reason":"stop","usage":{"prompt_tokens":2,"completion_tokens":1}}]}`, "[DONE]"),
			parsed{text: "a", finish: "stop", usage: chat.Usage{InputTokens: 2, OutputTokens: 1}}},
		{"usage as strings and floats", "", sse(stopChunk, `{"usage":{"prompt_tokens":"12","completion_tokens":3.0,"total_tokens":"x"}}`, "[DONE]"),
			parsed{finish: "stop", usage: chat.Usage{InputTokens: 12, OutputTokens: 3}}},
		{"usage at top level (ollama names)", "", sse(`{"choices":[{"delta":{},"finish_reason":"stop"}],"prompt_eval_count":9,"eval_count":8}`, "[DONE]"),
			parsed{finish: "stop", usage: chat.Usage{InputTokens: 9, OutputTokens: 8}}},
		{"running usage, last wins", "", sse(`{"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":4,"completion_tokens":1}}`,
			`{"choices":[{"delta":{"content":"b"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`, "[DONE]"),
			parsed{text: "ab", finish: "stop", usage: chat.Usage{InputTokens: 4, OutputTokens: 2}}},
		{"tool call in string fragments", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Paris\"}"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `call_1 get_weather {"city":"Paris"};`, finish: "tool_calls"}},
		{"tool arguments as an object", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c9","function":{"name":"f","arguments":{"a":[1,2]}}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `c9 f {"a":[1,2]};`, finish: "tool_calls"}},
		{"missing id and index", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `call_<minted> f {"x":1};`, finish: "tool_calls"}},
		{"parallel calls interleaved by index", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"n\":"}},{"index":1,"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `a f {"n":1};b g {};`, finish: "tool_calls"}},
		{"new id without index starts a call", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"{}"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `a f {};b g {};`, finish: "tool_calls"}},
		{"name repeated in every delta", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"k\""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":":2}"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `a f {"k":2};`, finish: "tool_calls"}},
		{"double-encoded arguments", "", sse(
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"\"{\\\"k\\\":1}\""}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `a f {"k":1};`, finish: "tool_calls"}},
		{"empty arguments", "", sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f"}}]}}]}`, toolStop, "[DONE]"),
			parsed{calls: `a f {};`, finish: "tool_calls"}},
		{"arguments not an object", "", sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"k\":"}}]}}]}`, toolStop, "[DONE]"),
			parsed{err: `upstream error: tool call f: arguments are not a JSON object: {"k":`}},
		{"tool call finished with stop", "", sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}}]}}]}`, stopChunk, "[DONE]"),
			parsed{calls: `a f {};`, finish: "tool_calls"}},
		{"legacy function_call", "", sse(`{"choices":[{"delta":{"function_call":{"name":"f","arguments":"{\"a\""}}}]}`,
			`{"choices":[{"delta":{"function_call":{"arguments":":1}"}},"finish_reason":"function_call"}]}`, "[DONE]"),
			parsed{calls: `call_<minted> f {"a":1};`, finish: "tool_calls"}},
		{"content as parts", "", sse(`{"choices":[{"delta":{"content":[{"type":"text","text":"a"},"b",{"type":"image_url"},{"text":"c"}]}}]}`, stopChunk, "[DONE]"),
			parsed{text: "abc", finish: "stop"}},
		{"role chunk with null content", "", sse(`{"choices":[{"delta":{"role":"assistant","content":null}}]}`, text("é\n\"q\""), stopChunk, "[DONE]"),
			parsed{text: "é\n\"q\"", finish: "stop"}},
		{"finish length", "", sse(text("a"), `{"choices":[{"delta":{},"finish_reason":"length"}]}`, "[DONE]"),
			parsed{text: "a", finish: "length"}},
		{"finish content_filter", "", sse(text("a"), `{"choices":[{"delta":{},"finish_reason":"content_filter"}]}`, "[DONE]"),
			parsed{text: "a", finish: "stop"}},
		{"[DONE] without a finish", "", sse(text("a"), "[DONE]"), parsed{text: "a", finish: "stop"}},
		{"finish without [DONE]", "", sse(text("a"), stopChunk), parsed{text: "a", finish: "stop"}},
		{"cut short", "", sse(text("a")), parsed{text: "a", err: "openai t: answer stream ended before its finish: worker connection lost"}},
		{"empty body", "", "", parsed{err: "answer stream ended before its finish: worker connection lost"}},
		{"malformed chunk", "", sse(text("a"), `{"choices":[{"delta":{"content":"b"`), parsed{text: "a",
			err: `upstream error: malformed answer chunk (unexpected EOF): {"choices":[{"delta":{"content":"b"`}},
		{"malformed chunk is clipped", "", sse(`{"x":` + long), parsed{err: `looking for beginning of value): {"x":` + long[:195] + "..."}},
		{"error data line", "", sse(text("a"), `{"error":{"message":"simulated error","type":"server_error","code":"server_error"}}`),
			parsed{text: "a", err: "upstream error: simulated error"}},
		{"error with a status code", "", sse(`{"error":{"message":"overloaded","code":503}}`), parsed{err: "upstream error 503: overloaded"}},
		{"rate limit in stream", "", sse(`{"error":{"message":"slow down","type":"rate_limit_exceeded"}}`), parsed{err: "upstream rate limited: slow down"}},
		{"event: error", "", "event: error\ndata: {\"message\":\"boom\"}\n\n", parsed{err: "upstream error: boom"}},
		{"llama.cpp error field", "", "error: {\"code\":500,\"message\":\"slot unavailable\",\"type\":\"server_error\"}\n\n",
			parsed{err: "upstream error 500: slot unavailable"}},
		{"CRLF, comments, ids, no space", "", ": keep-alive\r\n\r\nid: 1\r\nevent: message\r\ndata:" + text("a") + "\r\n\r\nretry: 10\r\ndata: " + stopChunk + "\r\n\r\ndata: [DONE]\r\n\r\n",
			parsed{text: "a", finish: "stop"}},
		{"data split over lines", "", "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
			parsed{text: "a", finish: "stop"}},
		{"line longer than the read buffer", "", sse(text(long), stopChunk, "[DONE]"), parsed{text: long, finish: "stop"}},
		{"bare JSON lines", "", text("a") + "\n" + stopChunk + "\n", parsed{text: "a", finish: "stop"}},
		{"non-stream completion", "application/json", `{"id":"x","object":"chat.completion","choices":[{"index":0,
			"message":{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},
			{"type":"function","function":{"name":"g","arguments":{"b":2}}}]},"finish_reason":"tool_calls"}],
			"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
			parsed{calls: `c1 f {"a":1};call_<minted> g {"b":2};`, finish: "tool_calls", usage: chat.Usage{InputTokens: 10, OutputTokens: 5}}},
		{"non-stream text as parts", "application/json; charset=utf-8", `{"choices":[{"message":{"content":[{"type":"text","text":"hi"}]},"finish_reason":"stop"}]}`,
			parsed{text: "hi", finish: "stop"}},
		{"non-stream without a finish", "text/plain", "\n {\"choices\":[{\"message\":{\"content\":\"hi\"}}]}",
			parsed{text: "hi", finish: "stop"}},
		{"non-stream error body", "application/json", `{"error":{"message":"model not loaded"}}`, parsed{err: "upstream error: model not loaded"}},
		{"non-stream malformed", "application/json", `{"choices":[`, parsed{err: `upstream error: malformed answer (unexpected EOF): {"choices":[`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ct := tt.ct
			if ct == "" {
				ct = "text/event-stream"
			}
			got := parse(ct, tt.give)
			gotErr, wantErr := got.err, tt.want.err
			got.err, tt.want.err = "", ""
			if got != tt.want || (gotErr == "") != (wantErr == "") || !strings.Contains(gotErr, wantErr) {
				t.Errorf("got %+v (err %q)\nwant %+v (err containing %q)", got, gotErr, tt.want, wantErr)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		give http.Header
		want time.Duration
	}{
		{"seconds", http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		{"fractional", http.Header{"Retry-After": {"1.5"}}, 1500 * time.Millisecond},
		{"http date", http.Header{"Retry-After": {now.Add(7 * time.Second).Format(http.TimeFormat)}}, 7 * time.Second},
		{"past date", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0},
		{"milliseconds", http.Header{"Retry-After-Ms": {"250"}}, 250 * time.Millisecond},
		{"absurd", http.Header{"Retry-After": {"9999999"}}, 24 * time.Hour},
		{"none", http.Header{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retryAfter(tt.give, now); got != tt.want {
				t.Errorf("retryAfter = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestBodyMessage(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{`{"error":{"message":"context too long","type":"invalid_request_error"}}`, "context too long"},
		{`{"error":"bad model"}`, "bad model"},
		{`{"message":"nope"}`, "nope"},
		{`{"detail":"Loading model"}`, "Loading model"},
		{`{"detail":[{"loc":["body"],"msg":"field required"}]}`, `[{"loc":["body"],"msg":"field required"}]`},
		{"  plain text failure\n", "plain text failure"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := bodyMessage([]byte(tt.give)); got != tt.want {
			t.Errorf("bodyMessage(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestParseModels(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{`{"object":"list","data":[{"id":"a"},{"id":"b","name":"B"}]}`, "a/a b/B"},
		{`{"models":[{"name":"llama3:8b","model":"llama3:8b"}]}`, "llama3:8b/llama3:8b"},
		{`[{"id":"x"},{}]`, "x/x"},
		{`{"data":[]}`, ""},
	}
	for _, tt := range tests {
		models, err := parseModels([]byte(tt.give))
		var got []string
		for _, m := range models {
			got = append(got, m.ID+"/"+m.Name)
		}
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("parseModels(%s) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
	if _, err := parseModels([]byte(`<html>`)); err == nil {
		t.Errorf("parseModels(<html>) = nil error, want one")
	}
}

func TestEventBuffered(t *testing.T) {
	tests := []struct {
		name, give string
		want       bool
	}{
		{"whole event", "data: {\"a\":1}\n\n", true},
		{"crlf", "event: x\r\ndata: {}\r\n\r\n", true},
		{"after a comment", ": ping\n\ndata: {}\n\n", true},
		{"half an event", "data: {\"a\":1}\n", false},
		{"only a comment", ": ping\n\n", false},
		{"not at a line start", "x data: {}\n\n", false},
		{"the closing one", "data: [DONE]\n\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &sseReader{r: bufio.NewReaderSize(strings.NewReader(tt.give), 4096)}
			_, _ = s.r.Peek(1) // fill the buffer, as a read from the connection does
			if got := s.eventBuffered(); got != tt.want {
				t.Errorf("eventBuffered(%q) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}
