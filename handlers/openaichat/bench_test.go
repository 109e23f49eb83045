package openaichat

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// benchBody is a typical agent request: a system prompt, a few turns, a
// tool round trip and two tools.
const benchBody = `{"model":"qwen-max","stream":true,"stream_options":{"include_usage":true},"temperature":0.2,
"messages":[
 {"role":"system","content":"You are a careful coding assistant. Answer briefly and cite files."},
 {"role":"user","content":"Find where the retry budget is configured."},
 {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"grep","arguments":"{\"pattern\":\"retry\",\"path\":\".\"}"}}]},
 {"role":"tool","tool_call_id":"call_1","content":"pool/router.go:42: retryBudget := cfg.Retries\npool/config.go:17: Retries int"},
 {"role":"user","content":[{"type":"text","text":"Great, and what is the default?"}]}
],
"tools":[
 {"type":"function","function":{"name":"grep","description":"Search files","parameters":{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"}},"required":["pattern"]}}},
 {"type":"function","function":{"name":"read_file","description":"Read a file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}
]}`

func BenchmarkDecode(b *testing.B) {
	body := []byte(benchBody)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, _, err := decodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeText(b *testing.B) {
	enc := newStreamEncoder("chatcmpl-abcdefghijklmnopqrstuvwx", "qwen-max", 1700000000, true)
	delta := " the retry budget defaults to \"3\"\n"
	b.ReportAllocs()
	for b.Loop() {
		enc.text(delta)
	}
}

// discardWriter is a ResponseWriter that flushes to nowhere, so the
// benchmark measures the gateway's own work.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}
func (d *discardWriter) Flush()                      {}

// SetWriteDeadline is supported, as by net/http's own writer.
func (d *discardWriter) SetWriteDeadline(time.Time) error { return nil }

// replay answers every request with prepared events, recording nothing
// (chattest.Source keeps each request, which a benchmark would count).
type replay struct{ events []chat.Event }

func (p replay) Open(ctx context.Context, _ *chat.Request, _ bool) (chat.Answer, string, error) {
	return chattest.NewScript(ctx, p.events...), "", nil
}

// BenchmarkStreamEvent measures the handler's CPU per streamed text event:
// reading the answer, keep-alive timer reset, chunk encoding and the SSE write
// with its flush. ns/op is per event.
func BenchmarkStreamEvent(b *testing.B) {
	const perStream = 256
	events := make([]chat.Event, 0, perStream+1)
	for range perStream {
		events = append(events, chat.Event{Type: chat.EventText, Text: " token"})
	}
	events = append(events, chat.Event{Type: chat.EventDone, Finish: chat.FinishStop})
	h := relaytest.Serve(New(Config{}, nil), replay{events})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	b.ReportAllocs()
	for i := 0; i < b.N; i += perStream {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		h(&discardWriter{h: http.Header{}}, r)
	}
}

func BenchmarkNonStream(b *testing.B) {
	events := []chat.Event{
		{Type: chat.EventText, Text: "The default is three retries."},
		{Type: chat.EventDone, Finish: chat.FinishStop, Usage: chat.Usage{InputTokens: 120, OutputTokens: 7}},
	}
	h := relaytest.Serve(New(Config{}, nil), replay{events})
	body := strings.Replace(benchBody, `"stream":true`, `"stream":false`, 1)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r = r.WithContext(httpx.WithRequestID(r.Context(), "req"))
		w := &discardWriter{h: http.Header{}}
		h(w, r)
	}
}

func TestBenchBodyIsValid(t *testing.T) {
	if !json.Valid([]byte(benchBody)) {
		t.Fatal("benchBody is not valid JSON")
	}
	if _, _, err := decodeRequest([]byte(benchBody)); err != nil {
		t.Fatal(err)
	}
}
