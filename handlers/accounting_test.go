package handlers

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/keylimits"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
)

// fakeLimiter admits through the real in-memory limiter (so its tickets are
// real ones), denies what deny names, and counts what it was asked.
type fakeLimiter struct {
	mu      sync.Mutex
	mem     *keylimits.Memory // made on first use
	deny    *keylimits.Denied
	asked   int
	charged []string
}

func (f *fakeLimiter) Acquire(ctx context.Context, key string, l keylimits.Limits) (*keylimits.Ticket, error) {
	f.mu.Lock()
	f.asked++
	if f.deny != nil {
		d := *f.deny
		d.Key = key
		f.mu.Unlock()
		return nil, &d
	}
	mem := f.memory()
	f.mu.Unlock()
	return mem.Acquire(ctx, key, l)
}

// memory is the real limiter behind f; f.mu must be held.
func (f *fakeLimiter) memory() *keylimits.Memory {
	if f.mem == nil {
		f.mem = keylimits.NewMemory(nil)
	}
	return f.mem
}

// spent reports whether the tickets of key ended with n tokens in all
// today, as the limiter holds them: a daily quota of n+1 admits the key and
// (for n > 0) one of n refuses it.
func (f *fakeLimiter) spent(t *testing.T, key string, n int64) bool {
	t.Helper()
	f.mu.Lock()
	mem := f.memory()
	f.mu.Unlock()
	ctx := context.Background()
	under, err := mem.Acquire(ctx, key, keylimits.Limits{TokensPerDay: n + 1})
	if err != nil {
		return false
	}
	under.Done(0)
	if n == 0 {
		return true
	}
	at, err := mem.Acquire(ctx, key, keylimits.Limits{TokensPerDay: n})
	at.Done(0)
	var d *keylimits.Denied
	return errors.As(err, &d) && d.Limit == keylimits.LimitTokensPerDay
}

func (f *fakeLimiter) Charge(_ context.Context, key string, tokens int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.charged = append(f.charged, key+":"+strconv.FormatInt(tokens, 10))
	return nil
}

type recorded struct {
	mu      sync.Mutex
	usage   []usage.Record
	entries []requestlog.Entry
}

func accountingEngine(t *testing.T, lim *fakeLimiter, rec *recorded, capture bool) *gin.Engine {
	t.Helper()
	gin.SetMode(gin.TestMode)
	keys := apikey.NewRegistry([]apikey.Key{{Name: "alice", Secret: "sk-a", RPM: 1}, {Name: "bob", Secret: "sk-b"},
		{Name: "carol", Secret: "sk-c", TokensPerDay: 1000}})
	acct := &Accounting{Limiter: lim, Capture: capture,
		Usage: func(r usage.Record) { rec.mu.Lock(); rec.usage = append(rec.usage, r); rec.mu.Unlock() },
		Log:   func(e requestlog.Entry) { rec.mu.Lock(); rec.entries = append(rec.entries, e); rec.mu.Unlock() }}
	// The chat protocol, answered by a router that says what it served,
	// and Anthropic's, for its token count.
	log := slog.New(slog.DiscardHandler)
	return New(Config{Credentials: &access.Credentials{Keys: keys, Hops: testHops(t, "cluster-secret", "replica-1")},
		Accounting: acct, Router: &fakeRouter{}}, []relay.Protocol{anthropic.New(anthropic.Config{}, log),
		openaichat.New(openaichat.Config{}, log)}, nil, log)
}

func testHops(t *testing.T, token, self string) *access.Hops {
	t.Helper()
	h, err := access.NewHops(token, self, "http://"+self+":8080")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// hopped is the chat request replica-2 forwards to replica-1 for the key
// named name (with its limits), signed with a key from token: the caller in
// the signed hop, no credential.
func hopped(t *testing.T, token string, key apikey.Key) *http.Request {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	key.Secret = ""
	s, err := testHops(t, token, "replica-2").Sign("replica-1", r.Method, r.RequestURI, access.NewHopBody([]byte(chatBody)),
		access.Caller{Key: &key, Role: access.RoleUser})
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(access.HopHeader, s.Header)
	return r
}

func do(e http.Handler, key string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	r.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return serve(e, r)
}

func serve(e http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.ServeHTTP(w, r)
	return w
}

func TestAccountingRecordsEachRequest(t *testing.T) {
	lim, rec := &fakeLimiter{}, &recorded{}
	e := accountingEngine(t, lim, rec, false)
	if w := do(e, "sk-a"); w.Code != http.StatusOK {
		t.Fatalf("alice: %d %s", w.Code, w.Body)
	}
	if w := do(e, "sk-b"); w.Code != http.StatusOK {
		t.Fatalf("bob: %d", w.Code)
	}
	if w := do(e, "sk-nobody"); w.Code != http.StatusUnauthorized {
		t.Fatalf("an unknown key: %d", w.Code)
	}
	if lim.asked != 1 || !lim.spent(t, "alice", 10) {
		t.Errorf("limiter asked %d times, or alice's ticket did not end with the turn's tokens: want once (only alice has limits), 10 tokens", lim.asked)
	}
	want := usage.Record{Key: "alice", Account: "acct-1", InputTokens: 7, OutputTokens: 3, Reused: true}
	if len(rec.usage) != 2 {
		t.Fatalf("usage records %+v, want alice's and bob's", rec.usage)
	}
	got := rec.usage[0]
	got.Time = time.Time{}
	if got != want || rec.usage[1].Key != "bob" {
		t.Errorf("usage %+v, want %+v then bob's", rec.usage, want)
	}
	en := rec.entries[0]
	if en.Key != "alice" || en.Instance != "sim-1" || en.Model != "m" || en.Protocol != "chat" || en.Status != 200 ||
		!en.Reused || en.Prompt != "" || en.Answer != "" {
		t.Errorf("log entry %+v", en)
	}
}

func TestAccountingCapturesTextOnlyWhenAsked(t *testing.T) {
	rec := &recorded{}
	do(accountingEngine(t, &fakeLimiter{}, rec, true), "sk-b")
	if e := rec.entries[0]; e.Prompt != "the prompt" || e.Answer != "the answer" {
		t.Errorf("debug entry %+v lacks the prompt and the answer", e)
	}
}

func TestAccountingRefusesOverALimit(t *testing.T) {
	lim := &fakeLimiter{deny: &keylimits.Denied{Limit: keylimits.LimitRPM, Max: 1, RetryAfter: 1500 * time.Millisecond}}
	rec := &recorded{}
	e := accountingEngine(t, lim, rec, false)
	w := do(e, "sk-a")
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "2" || w.Header().Get(LimitHeader) != "rpm" ||
		!strings.Contains(w.Body.String(), `"rate_limit_exceeded"`) || !strings.Contains(w.Body.String(), `\"alice\"`) {
		t.Errorf("over the limit: %d %v %s", w.Code, w.Header(), w.Body)
	}
	w = do(e, "sk-a", "anthropic-version", "2023-06-01")
	if w.Code != http.StatusTooManyRequests || !strings.HasPrefix(w.Body.String(), `{"type":"error"`) {
		t.Errorf("over the limit, Anthropic: %d %s", w.Code, w.Body)
	}
	if len(rec.entries) != 2 || rec.entries[0].Status != 429 || !strings.Contains(rec.entries[0].Error, "per minute") ||
		!rec.usage[0].Error || rec.usage[0].Account != "" {
		t.Errorf("a refusal's records: %+v %+v", rec.entries, rec.usage)
	}
	// A request another replica forwarded was admitted there.
	lim.asked = 0
	if w := serve(e, hopped(t, "cluster-secret", apikey.Key{Name: "alice", RPM: 1})); w.Code != http.StatusOK || lim.asked != 0 {
		t.Errorf("a forwarded request: %d %s, limiter asked %d times", w.Code, w.Body, lim.asked)
	}
	// ... but its tokens are known only here: they count against the
	// quota the hop says the key has.
	if w := serve(e, hopped(t, "cluster-secret", apikey.Key{Name: "carol", TokensPerDay: 1000})); w.Code != http.StatusOK ||
		lim.asked != 0 || len(lim.charged) != 1 || lim.charged[0] != "carol:10" {
		t.Errorf("a forwarded request under a quota: %d, asked %d, charged %v", w.Code, lim.asked, lim.charged)
	}
	if n := len(rec.usage); n == 0 || rec.usage[n-1].Key != "carol" {
		t.Errorf("usage %+v, want the forwarded request recorded for carol", rec.usage)
	}
}

// A hop not signed with this cluster's key turns off no limit: the request
// is refused before admission, whatever key it carries besides; so is the
// older versions' hop, the cluster token itself. A node that is not
// clustered takes no hop at all.
func TestForgedHopIsRefused(t *testing.T) {
	lim := &fakeLimiter{}
	forged := func(token string) *http.Request {
		r := hopped(t, token, apikey.Key{Name: "alice"})
		r.Header.Set("Authorization", "Bearer sk-a")
		return r
	}
	legacy := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	legacy.Header.Set("Authorization", "Bearer sk-a")
	legacy.Header.Set("X-Poolgate-Forwarded-By", "replica-2")
	legacy.Header.Set("X-Poolgate-Cluster-Token", "cluster-secret")
	tests := []struct {
		name string
		give *http.Request
		want string
	}{
		{"signed with another token", forged("wrong"), "signature"},
		{"signed with a near miss", forged("cluster-secreT"), "signature"},
		{"the cluster token itself", legacy, "not credentials"},
	}
	for _, tt := range tests {
		rec := &recorded{}
		e := accountingEngine(t, lim, rec, false)
		if w := serve(e, tt.give); w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), tt.want) {
			t.Errorf("%s: %d %s, want 401 saying %q", tt.name, w.Code, w.Body, tt.want)
		}
		if len(rec.entries) != 0 || lim.asked != 0 {
			t.Errorf("%s: a refused hop reached the handler: %+v", tt.name, rec.entries)
		}
	}
	e := gin.New()
	e.Use(Authorize(&access.Credentials{Keys: apikey.NewRegistry([]apikey.Key{{Name: "a", Secret: "sk-a"}})}, nil))
	e.POST("/v1/chat/completions", func(c *gin.Context) { c.Status(http.StatusOK) })
	if w := serve(e, hopped(t, "cluster-secret", apikey.Key{Name: "a"})); w.Code != http.StatusUnauthorized {
		t.Errorf("a hop on a single node: %d, want 401", w.Code)
	}
}

// Counting tokens takes a request of the key's limits, so a key over its
// quota can't spend the gateway's CPU on it; it charges no tokens.
func TestCountTokensIsUnderTheKeysLimits(t *testing.T) {
	count := func(e http.Handler, key string) int {
		r := httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		r.Header.Set("X-Api-Key", key)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		return w.Code
	}
	lim := &fakeLimiter{}
	e := accountingEngine(t, lim, &recorded{}, false)
	if got := count(e, "sk-c"); got != http.StatusOK || lim.asked != 1 || !lim.spent(t, "carol", 0) {
		t.Errorf("count_tokens: %d, limiter asked %d times: want 200, asked once, no tokens spent", got, lim.asked)
	}
	lim.deny = &keylimits.Denied{Limit: keylimits.LimitTokensPerDay, Max: 1000, RetryAfter: time.Hour}
	if got := count(e, "sk-c"); got != http.StatusTooManyRequests {
		t.Errorf("count_tokens over the daily quota: %d, want 429", got)
	}
}
