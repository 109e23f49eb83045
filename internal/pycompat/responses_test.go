package pycompat_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/session"
)

// protocol is the protocols table's protocol named name, with the Python
// gateway's shapes (on or off) as the wiring gives them.
func protocol(t *testing.T, on bool, name string) relay.Protocol {
	t.Helper()
	for _, p := range protocols.Table(protocols.Config{Responses: session.NewMemory(session.MemoryConfig{}), Compat: pycompat.Shapes{Enabled: on}}, nil) {
		if p.Relay().Name() == name {
			return p
		}
	}
	t.Fatalf("no protocol %s in the table", name)
	return nil
}

// newHandler serves Responses' create as the edge serves it, answered by
// pool.
func newHandler(t *testing.T, on bool, pool relaytest.Source) http.HandlerFunc {
	return relaytest.Serve(protocol(t, on, "responses"), pool)
}

// volatile matches the random ids and the clock in a transcript.
var volatile = regexp.MustCompile(`\b(resp|msg|fc|fco|call)_[a-z2-7]{26}\b|"created_at":\d+`)

// record runs one create request and returns status, content type and
// body, as handlers/responses' golden transcripts keep them.
func record(t *testing.T, h http.HandlerFunc, body string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
	req = req.WithContext(httpx.WithRequestID(req.Context(), "req-1"))
	rec := httptest.NewRecorder()
	h(rec, req)
	return volatile.ReplaceAllStringFunc(testenv.Transcript(rec), func(m string) string {
		if strings.HasPrefix(m, `"created_at"`) {
			return `"created_at":0`
		}
		return m[:strings.IndexByte(m, '_')] + "_X"
	})
}

// With python_compat the answers are the Python gateway's where its clients
// read them: output_text in the body, data: [DONE] last, a failed stream
// ending with response.completed (status failed), a logged-out pool's 401.
func TestGoldenPythonCompat(t *testing.T) {
	tests := []struct {
		name   string
		give   []chat.Event
		giveFn error
		body   string
	}{
		{name: "stream", give: chattest.TextEvents("Hel", "lo")},
		{name: "stream_fails_half_way", give: []chat.Event{
			{Type: chat.EventText, Text: "Half an "},
			{Type: chat.EventError, Err: &chat.UpstreamError{Status: 500, Message: "worker crashed"}},
		}},
		{name: "nonstream", give: chattest.TextEvents("Hel", "lo"), body: `{"model":"m","input":"hi"}`},
		{name: "logged_out", giveFn: fmt.Errorf("%w: %w", chat.ErrNoInstance, chat.ErrNotLoggedIn)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &chattest.Source{Events: tt.give, Err: tt.giveFn}
			h := newHandler(t, true, pool)
			body := tt.body
			if body == "" {
				body = `{"model":"m","input":"hi","stream":true}`
			}
			testenv.Golden(t, "compat_"+tt.name, []byte(record(t, h, body)))
		})
	}
}

// What the Python gateway took in a request: a chat completions tool and an
// object tool output. With python_compat they are taken; without, they are
// 400s that name the Responses form and python_compat.
func TestPythonCompatRequests(t *testing.T) {
	chatTool := `{"model":"m","input":"weather?","tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}}]}`
	objectOutput := `{"model":"m","input":[{"role":"user","content":"weather?"},` +
		`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":{"temp":21,"unit":"C"}}]}`
	tests := []struct {
		name   string
		compat bool
		body   string
		want   string
	}{
		{"chat tool", true, chatTool, "200 OK"},
		{"chat tool without python_compat", false, chatTool, `tools[0] is a chat completions tool`},
		{"object output", true, objectOutput, "200 OK"},
		{"object output without python_compat", false, objectOutput, "python_compat takes any JSON there"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := &chattest.Source{Events: chattest.TextEvents("ok")}
			h := newHandler(t, tt.compat, pool)
			got := record(t, h, tt.body)
			if !strings.Contains(got, tt.want) {
				t.Fatalf("answer lacks %q:\n%s", tt.want, got)
			}
			reqs := pool.Requests()
			if !tt.compat {
				return
			}
			if len(reqs) != 1 {
				t.Fatalf("%d requests reached the pool, want 1", len(reqs))
			}
			r := reqs[0]
			switch {
			case strings.Contains(tt.body, `"tools"`):
				if len(r.Tools) != 1 || r.Tools[0].Name != "get_weather" || r.Tools[0].Description != "d" || string(r.Tools[0].Parameters) != `{"type":"object"}` {
					t.Errorf("tools %+v, want get_weather as defined", r.Tools)
				}
			default:
				last := r.Messages[len(r.Messages)-1]
				if last.Role != chat.RoleTool || last.Content != `{"temp":21,"unit":"C"}` {
					t.Errorf("last message %+v, want the tool output as its JSON text", last)
				}
			}
		})
	}
}
