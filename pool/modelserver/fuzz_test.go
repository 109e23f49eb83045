package modelserver

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

// FuzzParseStream feeds arbitrary bodies to the answer reader, as an event
// stream and as a non-stream body. It must never panic, must end every answer
// with exactly one EventDone or EventError, and may only emit tool calls
// whose arguments are a JSON object.
func FuzzParseStream(f *testing.F) {
	seeds := []string{
		sse(text("Hel"), text("lo"), stopChunk, `{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}`, "[DONE]"),
		sse(`{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{\"k\""}}]}}]}`,
			`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":2}"}}]}}]}`, toolStop, "[DONE]"),
		sse(`{"choices":[{"delta":{"tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]}}]}`, toolStop),
		sse(`{"choices":[{"delta":{"function_call":{"name":"f","arguments":"\"{}\""}}}]}`, "[DONE]"),
		sse(`{"choices":[{"delta":{"content":[{"type":"text","text":"a"},"b",{"x":1}]}}]}`, stopChunk),
		sse(`{"x_groq":{"usage":{"prompt_tokens":"3","completion_tokens":1.5}},"prompt_eval_count":2}`, "[DONE]"),
		sse(`{"error":{"message":"boom","code":429}}`),
		"event: error\ndata: {\"message\":\"boom\"}\n\n",
		"error: {\"code\":500,\"message\":\"x\"}\n\n",
		": ping\r\n\r\ndata:{\"choices\":[{\"delta\":\r\ndata: {\"content\":\"a\"}}]}\r\n\r\n",
		text("a") + "\n" + stopChunk + "\n",
		`{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"g","arguments":"{}"}}]},"finish_reason":"stop"}]}`,
		`{"choices":[{"delta":{"content":"b"`,
		"data: [DONE]\n\n",
		"",
	}
	for i, s := range seeds {
		f.Add([]byte(s), i%2 == 0)
	}
	d := New(Config{})
	f.Fuzz(func(t *testing.T, body []byte, eventStream bool) {
		ct := "application/octet-stream"
		if eventStream {
			ct = "text/event-stream"
		}
		var ends int
		parseBody(d, ct, bytes.NewReader(body), func(ev chat.Event) bool {
			if ends > 0 {
				t.Fatalf("event %+v after the end", ev)
			}
			switch ev.Type {
			case chat.EventDone:
				ends++
			case chat.EventError:
				if ev.Err == nil {
					t.Fatal("EventError without an error")
				}
				ends++
			case chat.EventToolCall:
				var obj map[string]any
				if ev.ToolCall.Name == "" || ev.ToolCall.ID == "" || json.Unmarshal([]byte(ev.ToolCall.Arguments), &obj) != nil {
					t.Fatalf("tool call %+v: want a name, an id and object arguments", ev.ToolCall)
				}
			}
			return true
		})
		if ends != 1 {
			t.Fatalf("answer ended %d times, want once", ends)
		}
	})
}
