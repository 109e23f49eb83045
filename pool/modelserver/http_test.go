package modelserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/worker"
)

// countingListener counts the TCP connections a server accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// fake is an httptest worker whose chat handler a test supplies.
type fake struct {
	ep    worker.Endpoint
	conns *countingListener

	mu      sync.Mutex
	body    []byte      // the last chat request's body
	headers http.Header // and its headers
}

// startFake starts the fake; opts adjust its server before it starts.
func startFake(t testing.TB, chat http.HandlerFunc, opts ...func(*http.Server)) *fake {
	t.Helper()
	f := &fake{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.body, f.headers = b, r.Header.Clone()
		f.mu.Unlock()
		chat(w, r)
	})
	srv := httptest.NewUnstartedServer(mux)
	f.conns = &countingListener{Listener: srv.Listener}
	srv.Listener = f.conns
	for _, o := range opts {
		o(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f.ep = worker.Endpoint{Name: "fake", Port: srv.Listener.Addr().(*net.TCPAddr).Port}
	return f
}

// sseReply answers every chat with a short complete stream.
func sseReply(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, sse(text("ok"), stopChunk, `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`, "[DONE]"))
}

func TestRequestBody(t *testing.T) {
	temp, topP := 0.5, 0.9
	tests := []struct {
		name string
		give chat.Turn
		want string
	}{
		{"plain", chat.Turn{Model: "m", SessionID: "ignored", Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}},
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"sampling and cap", chat.Turn{Messages: []chat.Message{{Role: chat.RoleSystem, Content: "be <brief>"}, {Role: chat.RoleUser, Content: "hi"}},
			MaxTokens: 64, Temperature: &temp, TopP: &topP},
			`{"messages":[{"role":"system","content":"be <brief>"},{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"temperature":0.5,"top_p":0.9}`},
		{"tool round trip", chat.Turn{Model: "m", Tools: []chat.Tool{{Name: "f", Description: "F", Parameters: json.RawMessage(`{"type":"object"}`)}, {Name: "g"}},
			ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "f"},
			Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"},
				{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}, {ID: "c2", Name: "g"}}},
				{Role: chat.RoleTool, ToolCallID: "c1", Name: "f", Content: "r1"},
				{Role: chat.RoleTool, ToolCallID: "c2", Content: "r2"}}},
			`{"model":"m","messages":[{"role":"user","content":"x"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]},` +
				`{"role":"tool","content":"r1","tool_call_id":"c1","name":"f"},{"role":"tool","content":"r2","tool_call_id":"c2"}],` +
				`"stream":true,"stream_options":{"include_usage":true},` +
				`"tools":[{"type":"function","function":{"name":"f","description":"F","parameters":{"type":"object"}}},{"type":"function","function":{"name":"g","parameters":{"type":"object","properties":{}}}}],` +
				`"tool_choice":{"function":{"name":"f"},"type":"function"}}`},
		{"tool choice none", chat.Turn{Tools: []chat.Tool{{Name: "f"}}, ToolChoice: chat.ToolChoice{Mode: chat.ToolNone}, Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}}},
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":"none"}`},
		{"tool choice required", chat.Turn{Tools: []chat.Tool{{Name: "f"}}, ToolChoice: chat.ToolChoice{Mode: chat.ToolRequired}, Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}}},
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{}}}}],"tool_choice":"required"}`},
		{"json answer", chat.Turn{Format: chat.Format{JSON: true}, Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}}},
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"response_format":{"type":"json_object"}}`},
		{"json answer by schema", chat.Turn{Format: chat.Format{JSON: true, Schema: json.RawMessage(`{"type":"object"}`)}, Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}}},
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object"}}}}`},
		{"tool choice ignored without tools", chat.Turn{ToolChoice: chat.ToolChoice{Mode: chat.ToolRequired}, Messages: []chat.Message{{Role: chat.RoleUser, Content: "x"}}},
			`{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true}}`},
	}
	f := startFake(t, sseReply)
	c := connect(t, newDriver(t, Config{APIKey: "sk-test"}), f.ep)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a := runTurn(t, c, &tt.give); a.err != nil {
				t.Fatalf("chat: %v", a.err)
			}
			f.mu.Lock()
			got, auth := bytes.TrimSpace(f.body), f.headers.Get("Authorization")
			f.mu.Unlock()
			if string(got) != tt.want || auth != "Bearer sk-test" {
				t.Errorf("body = %s (auth %q)\nwant %s (auth %q)", got, auth, tt.want, "Bearer sk-test")
			}
		})
	}
}

func TestStatusErrors(t *testing.T) {
	date := time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
	tests := []struct {
		name    string
		status  int
		header  string // Retry-After
		body    string
		wantMsg string
	}{
		{"429 with http date", 429, date, `{"error":{"message":"quota"}}`, "upstream rate limited: quota"},
		{"400 with message", 400, "", `{"error":{"message":"context too long","type":"invalid_request_error"}}`, "upstream error 400: context too long"},
		{"404 plain text", 404, "", "no such route\n", "upstream error 404: no such route"},
		{"503 fastapi detail", 503, "", `{"detail":"Loading model"}`, "upstream error 503: Loading model"},
		{"502 empty", 502, "", "", "upstream error 502: Bad Gateway"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
				if tt.header != "" {
					w.Header().Set("Retry-After", tt.header)
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			c := connect(t, newDriver(t, Config{}), f.ep)
			a, err := c.Start(context.Background(), userTurn("x"))
			if a != nil {
				a.Close()
			}
			var rl *chat.RateLimitedError
			retry := time.Duration(0)
			if errors.As(err, &rl) {
				retry = rl.RetryAfter
			}
			if err == nil || err.Error() != tt.wantMsg || (tt.header != "") != (retry > 20*time.Second && retry <= 30*time.Second) {
				t.Errorf("err = %v (retry %s), want %q", err, retry, tt.wantMsg)
			}
		})
	}
}

func TestStaticModels(t *testing.T) {
	status := atomic.Int32{}
	status.Store(404)
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ep := worker.Endpoint{Name: "odd", Port: srv.Listener.Addr().(*net.TCPAddr).Port}

	if _, err := newDriver(t, Config{}).Connect(context.Background(), ep); err == nil {
		t.Errorf("Connect with a 404 /v1/models and no static list = nil error, want one")
	}
	c := connect(t, newDriver(t, Config{Models: []string{"local"}}), ep)
	models, err := c.Models(context.Background())
	if err != nil || len(models) != 1 || models[0].ID != "local" {
		t.Errorf("Models = %+v, %v; want the static list", models, err)
	}
	status.Store(503)
	if _, err := c.Status(context.Background()); err == nil {
		t.Errorf("Status with a 503 = nil error, want one even with a static list")
	}
}

func TestNonStreamingServer(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"whole"},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	c := connect(t, newDriver(t, Config{}), f.ep)
	a := runTurn(t, c, userTurn("x"))
	if a.err != nil || a.text != "whole" || a.done.Finish != chat.FinishLength || a.done.Usage != (chat.Usage{InputTokens: 3, OutputTokens: 1}) {
		t.Errorf("answer = %+v, done %+v; want the whole body as one answer", a, a.done)
	}
}

// TestConnectionReuse checks that turns reuse keep-alive connections: the
// default transport's two idle connections per host would make every round
// of eight concurrent turns redial six of them.
func TestConnectionReuse(t *testing.T) {
	f := startFake(t, sseReply)
	c := connect(t, newDriver(t, Config{}), f.ep)
	for range 20 {
		if a := runTurn(t, c, userTurn("x")); a.err != nil {
			t.Fatalf("chat: %v", a.err)
		}
		if _, err := c.Status(context.Background()); err != nil {
			t.Fatalf("Status: %v", err)
		}
	}
	if n := f.conns.n.Load(); n > 2 {
		t.Errorf("20 sequential turns used %d connections, want at most 2", n)
	}

	for range 5 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				a, err := c.Start(context.Background(), userTurn("x"))
				if err != nil {
					t.Errorf("Start: %v", err)
					return
				}
				chattest.Collect(a)
			})
		}
		wg.Wait()
	}
	if n := f.conns.n.Load(); n > 8+2 {
		t.Errorf("5 rounds of 8 concurrent turns used %d connections in all, want at most 10", n)
	}
}

func TestConnectionDroppedMidStream(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sse(text("partial")))
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler) // drops the connection, as a crashed worker does
	})
	c := connect(t, newDriver(t, Config{}), f.ep)
	a := runTurn(t, c, userTurn("x"))
	if a.text != "partial" || !errors.Is(a.err, chat.ErrWorkerGone) {
		t.Errorf("answer = %+v, want the partial text then ErrWorkerGone", a)
	}
}

// A whole turn asks for one JSON body, whose answer is read as the same
// events a stream makes; Next returns false past the closing one.
func TestWholeTurnPulled(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
	})
	c := connect(t, newDriver(t, Config{}), f.ep)
	a, err := c.Start(context.Background(), &chat.Turn{Model: "m", Whole: true,
		Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer a.Close()
	var got []chat.Event
	for {
		ev, ok := a.Next()
		if !ok {
			t.Fatalf("Next = false before the closing event (after %v)", got)
		}
		got = append(got, ev)
		if ev.Type == chat.EventDone || ev.Type == chat.EventError {
			break
		}
	}
	want := []chat.Event{{Type: chat.EventText, Text: "ok"},
		{Type: chat.EventDone, Finish: chat.FinishStop, Usage: chat.Usage{InputTokens: 3, OutputTokens: 1}}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	if ev, ok := a.Next(); ok {
		t.Errorf("Next past the end = %v, true; want false", ev)
	}
	f.mu.Lock()
	body := string(bytes.TrimSpace(f.body))
	f.mu.Unlock()
	if wantBody := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}`; body != wantBody {
		t.Errorf("body = %s, want %s", body, wantBody)
	}
}
