package modelserver

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

// stream100 is a typical streamed answer: 100 text deltas in the chunk shape
// llama.cpp and vLLM send, the finish, usage and [DONE].
func stream100() []byte {
	var b strings.Builder
	for i := range 100 {
		b.WriteString(`data: {"id":"chatcmpl-0123456789ab","object":"chat.completion.chunk","created":1700000000,"model":"kmodel","choices":[{"index":0,"delta":{"content":"word`)
		b.WriteByte(byte('0' + i%10))
		b.WriteString(` "},"finish_reason":null}]}` + "\n\n")
	}
	b.WriteString(sse(stopChunk, `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":100,"total_tokens":112}}`, "[DONE]"))
	return []byte(b.String())
}

// BenchmarkParseStream100 measures reading one 100-event answer into
// events (divide by 100 for the cost per event).
func BenchmarkParseStream100(b *testing.B) {
	body := stream100()
	d := New(Config{})
	r := bytes.NewReader(body)
	n := 0
	emit := func(chat.Event) bool { n++; return true }
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(body)
		parseBody(d, "text/event-stream", r, emit)
	}
	if n != 101*b.N {
		b.Fatalf("events = %d, want %d", n, 101*b.N)
	}
}

// BenchmarkChat100 measures a whole turn over loopback HTTP against a server
// that replays the 100-event answer: request encoding, the pooled transport
// and the reader (the server's side is included in the time).
func BenchmarkChat100(b *testing.B) {
	body := stream100()
	f := startFake(b, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	})
	c := connect(b, newDriver(b, Config{}), f.ep)
	turn := userTurn("hello")
	b.ReportAllocs()
	for b.Loop() {
		a, err := c.Start(context.Background(), turn)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, ok := a.Next(); ok; _, ok = a.Next() {
			n++
		}
		a.Close()
		if n != 101 {
			b.Fatalf("events = %d, want 101", n)
		}
	}
}

// agentTurn is a coding agent's turn: a system prompt, a tool round trip,
// two tools, a JSON format and a transcript of a few kilobytes.
func agentTurn() *chat.Turn {
	temp := 0.2
	return &chat.Turn{Model: "kmodel", MaxTokens: 512, Temperature: &temp,
		Format: chat.Format{JSON: true, Schema: []byte(`{"type":"object"}`)},
		Messages: []chat.Message{
			{Role: chat.RoleSystem, Content: strings.Repeat("You are a careful coding assistant; cite files. ", 40)},
			{Role: chat.RoleUser, Content: "Find where the retry budget is configured."},
			{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "grep", Arguments: `{"pattern":"retry"}`}}},
			{Role: chat.RoleTool, ToolCallID: "call_1", Name: "grep", Content: strings.Repeat("pool/router.go:42: retryBudget := cfg.Retries\n", 60)},
			{Role: chat.RoleUser, Content: "Great, and what is the \"default\"?"},
		},
		Tools: []chat.Tool{
			{Name: "grep", Description: "Search files", Parameters: []byte(`{"type":"object","properties":{"pattern":{"type":"string"}}}`)},
			{Name: "read_file", Description: "Read a file"},
		},
		ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "grep"},
	}
}

// BenchmarkEncodeTurn measures encoding an agent's turn into a request.
func BenchmarkEncodeTurn(b *testing.B) {
	d := New(Config{})
	turn := agentTurn()
	b.ReportAllocs()
	for b.Loop() {
		p, err := d.encode(turn, nil)
		if err != nil {
			b.Fatal(err)
		}
		d.release(p)
	}
}
