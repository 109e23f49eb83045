package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/openaiwire"
)

// oaiPost sends a chat completion request and returns the response.
func oaiPost(t *testing.T, h *harness, body map[string]any) *http.Response {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Timeout: wait}
	resp, err := c.Post(h.baseURL()+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func userMsg(text string) []map[string]any {
	return []map[string]any{{"role": "user", "content": text}}
}

var oaiWeather = []map[string]any{{"type": "function", "function": map[string]any{
	"name": "get_weather", "description": "Weather",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
}}}

type oaiChunk struct {
	Choices []struct {
		Delta struct {
			Role      string                     `json:"role"`
			Content   string                     `json:"content"`
			ToolCalls []openaiwire.ToolCallDelta `json:"tool_calls"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct{ Message string } `json:"error"`
}

// streamSummary condenses a stream for comparison.
type streamSummary struct {
	content, finish, args, callName string
	contentChunks, argFrags         int
	usage, done, errored            bool
}

func summarize(t *testing.T, resp *http.Response) streamSummary {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type = %q, want text/event-stream", ct)
	}
	events, err := sseEvents(resp.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	var s streamSummary
	for _, ev := range events {
		if ev == "[DONE]" {
			s.done = true
			continue
		}
		var ch oaiChunk
		if err := json.Unmarshal([]byte(ev), &ch); err != nil {
			t.Fatalf("chunk %s: %v", ev, err)
		}
		s.usage = s.usage || ch.Usage != nil
		s.errored = s.errored || ch.Error != nil
		for _, c := range ch.Choices {
			if c.Delta.Content != "" {
				s.content += c.Delta.Content
				s.contentChunks++
			}
			for _, tc := range c.Delta.ToolCalls {
				s.callName += tc.Function.Name
				if tc.Function.Arguments != "" {
					s.args += tc.Function.Arguments
					s.argFrags++
				}
			}
			if c.FinishReason != nil {
				s.finish = *c.FinishReason
			}
		}
	}
	return s
}

func TestOpenAIModels(t *testing.T) {
	h := startSim(t, "--protocol=openai", "--model-keys=m1,m2")
	var got struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	getJSON(t, h.baseURL()+"/v1/models", &got)
	if got.Object != "list" || len(got.Data) != 2 || got.Data[0].ID != "m1" || got.Data[1].Object != "model" {
		t.Errorf("models = %+v, want a list of m1, m2", got)
	}
}

func TestOpenAIStream(t *testing.T) {
	tests := []struct {
		name string
		give map[string]any
		want streamSummary
	}{
		{"text with usage", map[string]any{"model": "m", "stream": true, "stream_options": map[string]any{"include_usage": true},
			"messages": userMsg("hi there")},
			streamSummary{content: "You said: hi there", contentChunks: 4, finish: "stop", usage: true, done: true}},
		{"chunks and delays", map[string]any{"stream": true, "messages": userMsg("a b c d [[sim:chunks=2]] [[sim:delay=5ms]] [[sim:chunk-delay=1ms]]")},
			streamSummary{content: "You said: a b c d", contentChunks: 2, finish: "stop", done: true}},
		{"tool call", map[string]any{"stream": true, "messages": userMsg("Paris"), "tools": oaiWeather},
			streamSummary{callName: "get_weather", args: `{"city":"Paris"}`, argFrags: 2, finish: "tool_calls", done: true}},
		{"tool choice none", map[string]any{"stream": true, "messages": userMsg("Paris"), "tools": oaiWeather, "tool_choice": "none"},
			streamSummary{content: "You said: Paris", contentChunks: 3, finish: "stop", done: true}},
		{"after tool result", map[string]any{"stream": true, "tools": oaiWeather, "messages": []map[string]any{
			{"role": "user", "content": "Paris"},
			{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{"id": "call_1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"Paris"}`}}}},
			{"role": "tool", "tool_call_id": "call_1", "content": "18C"},
		}}, streamSummary{content: "Tool get_weather returned: 18C", contentChunks: 4, finish: "stop", done: true}},
		{"error after", map[string]any{"stream": true, "messages": userMsg("a b [[sim:error-after=1]]")},
			streamSummary{content: "You ", contentChunks: 1, errored: true}},
	}
	h := startSim(t, "--protocol=openai")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := oaiPost(t, h, tt.give)
			if got := summarize(t, resp); got != tt.want {
				t.Errorf("stream = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOpenAINonStream(t *testing.T) {
	type want struct {
		content, finish, call, args string
		completion                  int
	}
	tests := []struct {
		name string
		give map[string]any
		want want
	}{
		{"text", map[string]any{"messages": userMsg("hello world [[sim:words=5]]")},
			want{content: "You said: hello world lorem", finish: "stop", completion: 5}},
		{"forced tool", map[string]any{"messages": userMsg("Rome"), "tools": oaiWeather,
			"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}},
			want{finish: "tool_calls", call: "get_weather", args: `{"city":"Rome"}`, completion: 2}},
		{"json schema", map[string]any{"messages": userMsg("rate it"), "response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "r", "schema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}}}},
			want{content: `{"n":1}`, finish: "stop", completion: 1}},
	}
	h := startSim(t, "--protocol=openai")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var body struct {
				Choices []struct {
					Message struct {
						Content   *string
						ToolCalls []openaiwire.ToolCallDelta `json:"tool_calls"`
					}
					FinishReason string `json:"finish_reason"`
				}
				Usage struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			resp := oaiPost(t, h, tt.give)
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || len(body.Choices) != 1 {
				t.Fatalf("decode: %v (%+v)", err, body)
			}
			ch := body.Choices[0]
			got := want{finish: ch.FinishReason, completion: body.Usage.CompletionTokens}
			if ch.Message.Content != nil {
				got.content = *ch.Message.Content
			}
			for _, tc := range ch.Message.ToolCalls {
				got.call, got.args = tc.Function.Name, tc.Function.Arguments
			}
			if got != tt.want {
				t.Errorf("completion = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOpenAIFaults(t *testing.T) {
	type want struct {
		status     int
		retryAfter string
		errType    string
	}
	tests := []struct {
		name string
		give string
		want want
	}{
		{"ratelimit", "x [[sim:ratelimit=2s]]", want{429, "2", "rate_limit_exceeded"}},
		{"error", "x [[sim:error]]", want{500, "", "server_error"}},
		{"error after non-stream", "x [[sim:error-after=1]]", want{500, "", "server_error"}},
	}
	h := startSim(t, "--protocol=openai")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := oaiPost(t, h, map[string]any{"messages": userMsg(tt.give)})
			var body struct{ Error struct{ Type string } }
			_ = json.NewDecoder(resp.Body).Decode(&body)
			got := want{resp.StatusCode, resp.Header.Get("Retry-After"), body.Error.Type}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestOpenAIHangAndCrash(t *testing.T) {
	h := startSim(t, "--protocol=openai")
	c := &http.Client{Timeout: 200 * time.Millisecond}
	_, err := c.Post(h.baseURL()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"[[sim:hang]]"}]}`))
	if err == nil {
		t.Error("hang: got a response, want a client timeout")
	}

	resp := oaiPost(t, h, map[string]any{"stream": true, "messages": userMsg("a b c [[sim:crash]]")})
	b, _ := io.ReadAll(resp.Body)
	select {
	case code := <-h.exits:
		if code != 3 {
			t.Errorf("exit code = %d, want 3", code)
		}
	case <-time.After(wait):
		t.Fatal("crash did not call the exit hook")
	}
	if !strings.Contains(string(b), `"content":"You "`) || strings.Contains(string(b), "[DONE]") {
		t.Errorf("crashed stream = %q, want the first delta and no [DONE]", b)
	}
	if st := h.stats(t); st.Asks != 2 {
		t.Errorf("asks = %d, want 2", st.Asks)
	}
}

func TestOpenAIBadRequest(t *testing.T) {
	h := startSim(t, "--protocol=openai")
	resp, err := http.Post(h.baseURL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("empty messages status = %d, want 400", resp.StatusCode)
	}
}
