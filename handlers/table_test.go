package handlers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/requestlog"
)

// echoProtocol is a protocol the edge has never heard of, added only by
// its line in the protocols table: a turn on a path of its own (its body
// is the prompt), and a Gemini-like path whose method its Accept picks per
// request (:go a turn, :count served as it is, anything else no route).
type echoProtocol struct{ relay.Codec }

func newEcho() *echoProtocol {
	return &echoProtocol{relay.NewCodec(relay.Config{Protocol: "echo", WriteError: openaierr.Write}, nil)}
}

func (p *echoProtocol) Endpoints() []relay.Endpoint {
	count := func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("counted " + r.PathValue("action")))
	}
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/chat/completions", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/v1beta/models/*action", Serves: relay.ServeNone, Serve: count}}
}

func (p *echoProtocol) Claims(*http.Request) bool { return false }

func (p *echoProtocol) Accept(r *http.Request) relay.Serving {
	switch {
	case !strings.HasPrefix(r.URL.Path, "/v1beta/"):
		return relay.AsEndpoint
	case strings.HasSuffix(r.URL.Path, ":go"):
		return relay.ServeTurn
	case strings.HasSuffix(r.URL.Path, ":count"):
		return relay.ServePlain
	}
	return relay.ServeNone
}

func (p *echoProtocol) Decode(_ *http.Request, body []byte) (*relay.Decoded, error) {
	req := &chat.Request{Model: "m", Messages: []chat.Message{{Role: chat.RoleUser, Content: string(body)}}}
	return &relay.Decoded{Request: req, Body: &echoBody{}}, nil
}

// echoBody encodes an answer as its text.
type echoBody struct{ relay.Collected }

func (b *echoBody) Body(chat.Event) ([]byte, error) { return []byte(`"` + b.Content() + `"`), nil }

// A protocol in the table is served by the edge like the built-in ones:
// its routes registered, its turns opened through the router under its
// name, encoded by its encoder, the instance named and the request
// recorded; its picked methods counted or refused without a turn.
func TestAProtocolIsOneLineInTheTable(t *testing.T) {
	tests := []struct {
		name, path, wantBody string
		wantStatus, wantOpen int
	}{
		{"a turn", "/v1/chat/completions", `"the answer"`, 200, 1},
		{"a picked turn", "/v1beta/models/x:go", `"the answer"`, 200, 1},
		{"a picked count", "/v1beta/models/x:count", "counted /x:count", 200, 0},
		{"no such method", "/v1beta/models/x:nope", "unknown route", 404, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gin.SetMode(gin.TestMode)
			fr, rec := &fakeRouter{}, &recorded{}
			acct := &Accounting{Log: func(e requestlog.Entry) { rec.mu.Lock(); rec.entries = append(rec.entries, e); rec.mu.Unlock() }}
			e := New(Config{Accounting: acct, Insecure: true, Router: fr}, []relay.Protocol{newEcho()}, nil, slog.New(slog.DiscardHandler))
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, tt.path, strings.NewReader("the prompt"))
			r.Header.Set("Content-Type", "application/json")
			e.ServeHTTP(w, r)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), tt.wantBody) {
				t.Fatalf("got %d %s, want %d with %s", w.Code, w.Body, tt.wantStatus, tt.wantBody)
			}
			calls := fr.Calls()
			if len(calls) != tt.wantOpen {
				t.Fatalf("router opened %d times, want %d", len(calls), tt.wantOpen)
			}
			if tt.wantOpen == 0 {
				return
			}
			if calls[0].API != "echo" || calls[0].Request.Messages[0].Content != "the prompt" || w.Header().Get(InstanceHeader) != "sim-1" {
				t.Errorf("call %+v, instance %q; want the echo API's prompt, served by sim-1", calls[0], w.Header().Get(InstanceHeader))
			}
			if len(rec.entries) != 1 || rec.entries[0].Protocol != "echo" || rec.entries[0].Account != "acct-1" {
				t.Errorf("log entries %+v, want one of the echo protocol", rec.entries)
			}
		})
	}
}

// The HTTP layer's own errors come in the caller's protocol shape, named by
// the same table as the protocols' errors.
func TestWriteError(t *testing.T) {
	tbl := newTable(protocols.Table(protocols.Config{}, nil))
	writeError := func(w http.ResponseWriter, r *http.Request, status int, msg string) {
		c, _ := gin.CreateTestContext(w)
		c.Request = r
		tbl.writeError(c, status, msg)
	}
	tests := []struct {
		path, header string
		status       int
		want         string
	}{
		{"/v1/chat/completions", "", 401, `{"error":{"message":"m","type":"authentication_error","param":null,"code":null}}` + "\n"},
		{"/v1/nothing", "", 404, `{"error":{"message":"m","type":"not_found_error","param":null,"code":null}}` + "\n"},
		{"/v1/responses", "", 413, `{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"request_too_large"}}` + "\n"},
		{"/internal/pool", "", 409, `{"error":{"message":"m","type":"server_error","param":null,"code":null}}` + "\n"},
		{"/v1/messages", "", 413, `{"type":"error","error":{"type":"request_too_large","message":"m"}}`},
		{"/v1/models", "2023-06-01", 401, `{"type":"error","error":{"type":"authentication_error","message":"m"}}`},
		{"/v1/messages", "", 500, `{"type":"error","error":{"type":"api_error","message":"m"}}`},
	}
	for _, tt := range tests {
		r := httptest.NewRequest(http.MethodPost, tt.path, nil)
		if tt.header != "" {
			r.Header.Set("anthropic-version", tt.header)
		}
		rec := httptest.NewRecorder()
		writeError(rec, r, tt.status, "m")
		if rec.Code != tt.status || rec.Body.String() != tt.want {
			t.Errorf("%s %d: got %d %s, want %s", tt.path, tt.status, rec.Code, rec.Body, tt.want)
		}
	}
	// Anthropic's error body names the request, as its API does: the id of
	// the response's X-Request-Id (with tracing on, the trace's).
	rec := httptest.NewRecorder()
	rec.Header().Set("X-Request-Id", "req_0af7651916cd43dd8448eb211c80319c")
	writeError(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", nil), 401, "m")
	if want := `{"type":"error","error":{"type":"authentication_error","message":"m"},"request_id":"req_0af7651916cd43dd8448eb211c80319c"}`; rec.Body.String() != want {
		t.Errorf("got %s, want %s", rec.Body, want)
	}
}
