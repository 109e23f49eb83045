package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	protocolstable "github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/tokens"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/session"
)

// acme is a made-up protocol, the whole of it in this file: the edge has
// never heard of it, and it is served through the real edge from one line
// in the protocols table. Its clients send their key in X-Acme-Key, its
// paths are under /acme/, its errors are {"acme_error": {...}}, it counts
// tokens and lists models in shapes of its own, and a client that sends
// X-Acme-Client gets its model listing on OpenAI's path too.
type acme struct{ relay.Codec }

func newAcme(o relay.Options) *acme {
	return &acme{relay.NewCodec(relay.Config{Options: o, Protocol: "acme", WriteError: writeAcmeError, Dropped: []string{"mood"}}, nil)}
}

func writeAcmeError(w http.ResponseWriter, p *apierr.Problem) {
	b, _ := json.Marshal(map[string]any{"acme_error": map[string]any{"status": p.Status, "reason": p.Message}})
	httpx.WriteJSON(w, p.Status, b)
}

func (a *acme) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/acme/ask", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/acme/count", Serves: relay.ServeCount},
		{Method: http.MethodGet, Path: "/acme/models", Serves: relay.ServeModels},
		{Method: http.MethodGet, Path: "/v1/models", Serves: relay.ServeModels}}
}

func (a *acme) Claims(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/acme/") || r.Header.Get("X-Acme-Client") != ""
}

func (a *acme) Accept(r *http.Request) relay.Serving {
	if key := r.Header.Get("X-Acme-Key"); key != "" {
		r.Header.Del("X-Acme-Key")
		r.Header.Set("Authorization", "Bearer "+key)
	}
	return relay.AsEndpoint
}

// acmeRequest is acme's request body: a prompt, and a mood no worker can
// honour (dropped and counted).
type acmeRequest struct {
	Prompt string `json:"prompt"`
	Mood   string `json:"mood"`
}

func (a *acme) decode(r *http.Request, body []byte) (*chat.Request, error) {
	var in acmeRequest
	if err := json.Unmarshal(body, &in); err != nil || in.Prompt == "" {
		return nil, &apierr.RequestError{Message: "acme wants {\"prompt\": ...}"}
	}
	var d httpx.Dropped
	if in.Mood != "" {
		d.Add("mood")
	}
	a.Report(r.Context(), &d)
	return &chat.Request{Model: "m", Messages: []chat.Message{{Role: chat.RoleUser, Content: in.Prompt}}}, nil
}

func (a *acme) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	req, err := a.decode(r, body)
	if err != nil {
		return nil, err
	}
	return &relay.Decoded{Request: req, Body: &acmeBody{}}, nil
}

func (a *acme) DecodeCount(r *http.Request, body []byte) (*chat.Request, error) {
	return a.decode(r, body)
}

func (a *acme) WriteCount(w http.ResponseWriter, n int) {
	httpx.WriteJSON(w, http.StatusOK, fmt.Appendf(nil, `{"acme_tokens":%d}`, n))
}

func (a *acme) WriteModels(w http.ResponseWriter, _ *http.Request, ms []chat.Model) {
	ids := make([]string, 0, len(ms))
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	b, _ := json.Marshal(map[string][]string{"acme_models": ids})
	httpx.WriteJSON(w, http.StatusOK, b)
}

// acmeBody encodes a whole answer as {"said": text}.
type acmeBody struct{ relay.Collected }

func (b *acmeBody) Body(chat.Event) ([]byte, error) {
	return json.Marshal(map[string]string{"said": b.Content()})
}

// acmePool answers every turn "the answer" and lists two models.
type acmePool struct {
	mu    sync.Mutex
	calls []route.Call
}

func (p *acmePool) Open(ctx context.Context, c route.Call) (route.Opened, error) {
	p.mu.Lock()
	p.calls = append(p.calls, c)
	p.mu.Unlock()
	a := chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "the answer"},
		chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, Usage: chat.Usage{InputTokens: 7, OutputTokens: 3}})
	return route.Opened{Answer: &acmeAnswer{Script: a}}, nil
}

func (p *acmePool) Models() []chat.Model { return []chat.Model{{ID: "m"}, {ID: "n"}} }

type acmeAnswer struct{ *chattest.Script }

func (a *acmeAnswer) Served() route.Served {
	return route.Served{Instance: "sim-1", Account: "acct-1", Model: "m", Usage: chat.Usage{InputTokens: 7, OutputTokens: 3}}
}

// A new protocol is one package and one line in the protocols table: the
// real edge serves acme's turns, counts its tokens, lists its models,
// reads its clients' key where they send it, answers its errors (a key
// refused, an unknown path, a bad body, a body over its cap) in its shape,
// records its requests under its name and keeps its metrics, with nothing
// in the edge, the access table or the metrics naming it; the built-in
// protocols are served as before beside it.
func TestANewProtocolIsOnePackageAndOneLine(t *testing.T) {
	m := metrics.New(prometheus.NewRegistry())
	opts := relay.Options{CountDropped: m.CountFieldIgnored}
	apis := protocolstable.Table(protocolstable.Config{Options: opts, Responses: session.NewMemory(session.MemoryConfig{})}, nil)
	apis = slices.Insert(apis, len(apis)-1, relay.Protocol(newAcme(opts))) // the one line: before the catch-all
	pool := &acmePool{}
	var mu sync.Mutex
	var logged []requestlog.Entry
	e := handlers.New(handlers.Config{Router: pool, Models: pool, MaxBodyBytes: 1 << 10,
		Credentials: &access.Credentials{Keys: apikey.NewRegistry([]apikey.Key{{Name: "wile", Secret: "sk-acme"}})},
		Accounting:  &handlers.Accounting{Log: func(en requestlog.Entry) { mu.Lock(); logged = append(logged, en); mu.Unlock() }}},
		apis, m, slog.New(slog.DiscardHandler))

	prompt := `{"prompt":"hello there","mood":"sunny"}`
	wantCount := fmt.Sprintf(`{"acme_tokens":%d}`, chat.PromptTokens([]chat.Message{{Role: chat.RoleUser, Content: "hello there"}}, tokens.Count))
	tests := []struct {
		name, method, path, body string
		header                   map[string]string
		wantStatus               int
		want                     string
	}{
		{"a turn", "POST", "/acme/ask", prompt, map[string]string{"X-Acme-Key": "sk-acme"}, 200, `{"said":"the answer"}`},
		{"its key refused", "POST", "/acme/ask", prompt, map[string]string{"X-Acme-Key": "sk-nobody"}, 401, `{"acme_error":{"reason":`},
		{"no key", "POST", "/acme/ask", prompt, nil, 401, `{"acme_error":{"reason":`},
		{"a bad body", "POST", "/acme/ask", `{}`, map[string]string{"X-Acme-Key": "sk-acme"}, 400, `"reason":"acme wants`},
		{"a body over its cap", "POST", "/acme/ask", `{"prompt":"` + strings.Repeat("x", 2<<10) + `"}`,
			map[string]string{"X-Acme-Key": "sk-acme"}, 413, `{"acme_error":{"reason":"request body exceeds`},
		{"an unknown path", "POST", "/acme/nope", prompt, map[string]string{"X-Acme-Key": "sk-acme"}, 404, `{"acme_error":{"reason":"unknown route`},
		{"a token count", "POST", "/acme/count", prompt, map[string]string{"X-Acme-Key": "sk-acme"}, 200, wantCount},
		{"its models", "GET", "/acme/models", "", map[string]string{"X-Acme-Key": "sk-acme"}, 200, `{"acme_models":["m","n"]}`},
		{"its models on OpenAI's path", "GET", "/v1/models", "", map[string]string{"X-Acme-Key": "sk-acme", "X-Acme-Client": "1"},
			200, `{"acme_models":["m","n"]}`},
		{"OpenAI's models beside it", "GET", "/v1/models", "", map[string]string{"Authorization": "Bearer sk-acme"}, 200, `"object":"list"`},
		{"Anthropic's beside it", "POST", "/v1/messages", `{}`, map[string]string{"X-Api-Key": "sk-acme"}, 400, `{"type":"error"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			if w.Code != tt.wantStatus || !strings.Contains(w.Body.String(), tt.want) {
				t.Errorf("got %d %s, want %d with %s", w.Code, w.Body, tt.wantStatus, tt.want)
			}
		})
	}
	pool.mu.Lock()
	calls := pool.calls
	pool.mu.Unlock()
	if len(calls) != 1 || calls[0].API != "acme" || calls[0].Request.Messages[0].Content != "hello there" {
		t.Errorf("router calls %+v, want the one acme turn", calls)
	}
	mu.Lock()
	defer mu.Unlock()
	var acmeLogged int
	for _, en := range logged {
		if en.Protocol == "acme" {
			acmeLogged++
		}
	}
	if acmeLogged != 2 { // the turn and the bad body: a refused key or body never reaches the protocol
		t.Errorf("request log %+v: %d entries of acme, want 2", logged, acmeLogged)
	}
	if got := counted(m.Requests.WithLabelValues("acme", "200")); got != 1 {
		t.Errorf("poolgate_requests_total{api=acme,code=200} = %v, want 1", got)
	}
	if got := counted(m.FieldsIgnored.WithLabelValues("acme", "mood")); got != 2 {
		t.Errorf("acme's dropped mood counted %v times, want 2 (the turn and the count)", got)
	}
}

// counted is a counter's value.
func counted(c prometheus.Counter) float64 {
	var pb dto.Metric
	_ = c.Write(&pb)
	return pb.GetCounter().GetValue()
}
