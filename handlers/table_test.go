package handlers

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/requestlog"
)

// echoProtocol is a protocol the edge has never heard of, added only by
// its line in the protocols table: a turn on a path of its own (its body
// is the prompt), and a Gemini-like path whose method is picked per
// request (:go a turn, :count a count, anything else no route). Its paths
// are ones access.Routes has rules for: who may call a route is decided
// there, and a route it has no rule for is refused.
type echoProtocol struct{ rl *relay.Relay }

func newEcho() *echoProtocol {
	return &echoProtocol{rl: relay.New(relay.Config{Protocol: "echo", WriteError: openaierr.Write}, nil)}
}

func (p *echoProtocol) Relay() *relay.Relay { return p.rl }

func (p *echoProtocol) Endpoints() []relay.Endpoint {
	count := func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("counted " + r.PathValue("action")))
	}
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/chat/completions"},
		{Method: http.MethodPost, Path: "/v1beta/models/*action", Serve: count, Pick: func(r *http.Request) relay.Serving {
			switch {
			case strings.HasSuffix(r.URL.Path, ":go"):
				return relay.ServeTurn
			case strings.HasSuffix(r.URL.Path, ":count"):
				return relay.ServeCount
			}
			return relay.ServeNone
		}}}
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
			e := New(Config{Accounting: acct, Insecure: true}, Protocols{Router: fr, APIs: []relay.Protocol{newEcho()}},
				nil, slog.New(slog.DiscardHandler))
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
