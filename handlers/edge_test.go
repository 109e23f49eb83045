package handlers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/session"
)

// chatBody is a chat completion request whose prompt is "the prompt".
const chatBody = `{"model":"m","messages":[{"role":"user","content":"the prompt"}]}`

// fakeRouter stands in for the pool's router. Each Open records its call
// and, unless the turn is another replica's, answers "the answer" as served
// by instance sim-1 of account acct-1 on model m, in a reused session, for
// 7 input and 3 output tokens, with the newest prompt message and the
// answer kept when the call captures them. With holder set, a call that
// may hop is told the turn belongs to the replica there.
type fakeRouter struct {
	holder string

	mu    sync.Mutex
	calls []route.Call
}

func (f *fakeRouter) Open(ctx context.Context, c route.Call) (route.Opened, error) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if c.MayHop && f.holder != "" {
		return route.Opened{Holder: f.holder}, nil
	}
	usage := chat.Usage{InputTokens: 7, OutputTokens: 3}
	s := route.Served{Instance: "sim-1", Account: "acct-1", Model: "m", Reused: true, Usage: usage}
	if c.Capture {
		s.Prompt, s.Answer = c.Request.Messages[len(c.Request.Messages)-1].Content, "the answer"
	}
	a := chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "the answer"},
		chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, Usage: usage})
	return route.Opened{Answer: &servedAnswer{Script: a, served: s},
		Served: route.Served{Instance: s.Instance, Account: s.Account, Model: s.Model}}, nil
}

// Calls returns the calls seen so far.
func (f *fakeRouter) Calls() []route.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]route.Call(nil), f.calls...)
}

// servedAnswer is a scripted answer that says how it was served.
type servedAnswer struct {
	*chattest.Script
	served route.Served
}

func (a *servedAnswer) Served() route.Served { return a.served }

// testEdge is the public API as the daemon wires it, on r, with keys sk-a (alice) and
// sk-b (bob); cfg says the rest (cluster, body cap).
func testEdge(t *testing.T, r Opener, cfg Config, rec *recorded) *gin.Engine {
	t.Helper()
	cfg.Credentials = &access.Credentials{Keys: apikey.NewRegistry([]apikey.Key{{Name: "alice", Secret: "sk-a"},
		{Name: "bob", Secret: "sk-b"}})}
	if cfg.Hop != nil {
		cfg.Credentials.Hops = cfg.Hop.Hops
	}
	cfg.Accounting = &Accounting{Usage: func(u usage.Record) { rec.mu.Lock(); rec.usage = append(rec.usage, u); rec.mu.Unlock() },
		Log: func(e requestlog.Entry) { rec.mu.Lock(); rec.entries = append(rec.entries, e); rec.mu.Unlock() }}
	log := slog.New(slog.DiscardHandler)
	cfg.Router = r
	return New(cfg, []relay.Protocol{anthropic.New(anthropic.Config{}, log),
		responses.New(responses.Config{}, session.NewMemory(session.MemoryConfig{}), log), openaichat.New(openaichat.Config{}, log)}, nil, log)
}

// post sends body to path on e with bob's key and a request id.
func post(e http.Handler, path, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	r.Header.Set("Authorization", "Bearer sk-b")
	r.Header.Set("X-Request-Id", "req-7")
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w
}

// The edge names each request to the router: its request id, the caller's
// key (which keeps callers' conversations apart), its API; and stamps the
// instance that served it on the response. On a single node nothing hops.
func TestEdgeNamesTheRequest(t *testing.T) {
	tests := []struct{ path, api, body string }{
		{"/v1/chat/completions", "chat", chatBody},
		{"/v1/responses", "responses", `{"model":"m","input":"the prompt"}`},
		{"/v1/messages", "messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"the prompt"}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.api, func(t *testing.T) {
			fr := &fakeRouter{}
			rec := &recorded{}
			w := post(testEdge(t, fr, Config{}, rec), tt.path, tt.body)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "the answer") ||
				w.Header().Get(InstanceHeader) != "sim-1" || w.Header().Get("X-Request-Id") != "req-7" {
				t.Fatalf("got %d %v %s", w.Code, w.Header(), w.Body)
			}
			calls := fr.Calls()
			if len(calls) != 1 {
				t.Fatalf("router called %d times, want once", len(calls))
			}
			c := calls[0]
			if c.API != tt.api || c.MayHop || c.Capture || c.Request.RequestID != "req-7" ||
				c.Request.Owner != access.OwnerOf("sk-b").Affinity {
				t.Errorf("call %+v with request id %q owner %q; want API %s, no hop, no capture, req-7, sk-b's owner",
					c, c.Request.RequestID, c.Request.Owner, tt.api)
			}
			if len(rec.entries) != 1 || rec.entries[0].Protocol != tt.api || rec.entries[0].RequestID != "req-7" ||
				rec.entries[0].Account != "acct-1" || rec.entries[0].InputTokens != 7 {
				t.Errorf("log entries %+v", rec.entries)
			}
		})
	}
}

// The edge reads the body once, under its cap: a body over it is a 413 in
// the caller's protocol whether it declared its length (refused before it
// is read) or not (refused as it is read), and reaches no router.
func TestBodyOverTheCap(t *testing.T) {
	big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 200) + `"}]}`
	for _, declared := range []bool{true, false} {
		for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
			fr := &fakeRouter{}
			e := testEdge(t, fr, Config{MaxBodyBytes: 100}, &recorded{})
			r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(big))
			r.Header.Set("Authorization", "Bearer sk-b")
			if !declared {
				r.ContentLength = -1
			}
			w := httptest.NewRecorder()
			e.ServeHTTP(w, r)
			want := `"code":"request_too_large"`
			if path == "/v1/messages" {
				want = `"type":"request_too_large"`
			}
			if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), want) || len(fr.Calls()) != 0 {
				t.Errorf("%s, declared %v: got %d %s, router called %d times; want 413 with %s, no call",
					path, declared, w.Code, w.Body, len(fr.Calls()), want)
			}
		}
	}
}

// testProxy is the hop of the replica run self, advertised at url.
func testProxy(t *testing.T, self, url string) *cluster.Proxy {
	t.Helper()
	hops, err := access.NewHops("cluster-secret", self, url)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster.Proxy{Hops: hops}
}

// A turn another replica holds is carried there by the cluster proxy: the
// holder's edge verifies the signed hop and names the caller from it (bob,
// without his key), serves the same body under the same request id and
// keeps the record; the client gets the holder's answer. When the holder
// can't be reached, the request is served here.
func TestHopToTheHolder(t *testing.T) {
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"the prompt"}]}`, stream)
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			holderRouter, holderRec := &fakeRouter{}, &recorded{}
			holder := httptest.NewUnstartedServer(nil)
			holder.Config.Handler = testEdge(t, holderRouter, Config{Hop: testProxy(t, "replica-2", "http://"+holder.Listener.Addr().String())},
				holderRec)
			holder.Start()
			defer holder.Close()
			fr := &fakeRouter{holder: holder.URL}
			rec := &recorded{}
			e := testEdge(t, fr, Config{Hop: testProxy(t, "replica-1", "http://replica-1:8080")}, rec)
			w := post(e, "/v1/chat/completions", body)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "the answer") || w.Header().Get(InstanceHeader) != "sim-1" ||
				w.Header().Get("X-Request-Id") != "req-7" || w.Header().Get(access.AnswerHeader) != "" {
				t.Errorf("client got %d %v %s, want the holder's answer", w.Code, w.Header(), w.Body)
			}
			if calls := holderRouter.Calls(); len(calls) != 1 || calls[0].MayHop || calls[0].Request.RequestID != "req-7" ||
				calls[0].Request.Owner != access.OwnerOf("sk-b").Affinity || calls[0].Request.Stream != stream {
				t.Errorf("the holder's router calls %+v, want one for bob's request req-7 that may not hop", calls)
			}
			if len(holderRec.entries) != 1 || holderRec.entries[0].Key != "bob" || holderRec.entries[0].RequestID != "req-7" {
				t.Errorf("the holder's records %+v, want bob's request req-7", holderRec.entries)
			}
			if calls := fr.Calls(); len(calls) != 1 || !calls[0].MayHop {
				t.Errorf("router calls %+v, want one that may hop", calls)
			}
			if len(rec.usage)+len(rec.entries) != 0 {
				t.Errorf("a hopped request was recorded here: %+v %+v", rec.usage, rec.entries)
			}

			// The holder went away: served here, by a second Open that
			// may not hop.
			holder.Close()
			fr = &fakeRouter{holder: holder.URL}
			rec = &recorded{}
			e = testEdge(t, fr, Config{Hop: testProxy(t, "replica-1", "http://replica-1:8080")}, rec)
			w = post(e, "/v1/chat/completions", body)
			if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "the answer") || w.Header().Get(InstanceHeader) != "sim-1" {
				t.Errorf("client got %d %v %s, want this replica's answer", w.Code, w.Header(), w.Body)
			}
			if calls := fr.Calls(); len(calls) != 2 || !calls[0].MayHop || calls[1].MayHop {
				t.Errorf("router calls %+v, want one that may hop, then one that may not", calls)
			}
			if len(rec.usage) != 1 || rec.usage[0].Account != "acct-1" || rec.usage[0].Error {
				t.Errorf("usage %+v, want the request served here", rec.usage)
			}
		})
	}
}
