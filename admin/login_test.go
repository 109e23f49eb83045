package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// fakeLogins is a LoginService that records what it was asked.
type fakeLogins struct {
	mu      sync.Mutex
	started []string
	shots   map[string][]byte
}

func (f *fakeLogins) Start(t supervisor.LoginTarget) login.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, t.Instance)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return login.Status{Name: t.Instance, State: login.StateRunning, StartedAt: &now}
}

// Status: an instance whose login was started is running.
func (f *fakeLogins) Status(name string) (login.Status, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.started, name) {
		return login.Status{Name: name, State: login.StateRunning}, true
	}
	return login.Status{Name: name, State: login.StateIdle}, false
}

func (f *fakeLogins) All() []login.Status {
	return []login.Status{{Name: "acct-1", State: login.StateSucceeded, Attempts: 1}, {Name: "down", State: login.StateFailed, Attempts: 3, LastError: "login page says: no"}}
}

func (f *fakeLogins) Screenshot(name string) ([]byte, error) {
	if b, ok := f.shots[name]; ok {
		return b, nil
	}
	return nil, login.ErrNoScreenshot
}

// fakeTargets knows instances by name, with their callback ports.
type fakeTargets struct {
	ports map[string]int
}

func (f *fakeTargets) LoginTarget(name string) (supervisor.LoginTarget, error) {
	if _, ok := f.ports[name]; !ok {
		return supervisor.LoginTarget{}, supervisor.ErrUnknownInstance
	}
	return supervisor.LoginTarget{
		Instance: name,
		Account:  worker.Account{Name: name, Username: "u-" + name},
		// The worker of "ready" is logged in; that of "down" does not answer.
		Confirm: func(context.Context) (bool, error) {
			if name == "down" {
				return false, chat.ErrWorkerGone
			}
			return name == "ready", nil
		},
		LoginURL: func(context.Context) (string, error) {
			if name == "down" {
				return "", chat.ErrWorkerGone
			}
			return "http://127.0.0.1:1/login?state=" + name, nil
		},
	}, nil
}

func (f *fakeTargets) LoginPort(name string) (int, error) {
	p, ok := f.ports[name]
	if !ok {
		return 0, supervisor.ErrUnknownInstance
	}
	return p, nil
}

func (f *fakeTargets) Names() []string { return slices.Sorted(maps.Keys(f.ports)) }

// State: every instance needs a login but "ready".
func (f *fakeTargets) State(name string) (supervisor.State, error) {
	if _, ok := f.ports[name]; !ok {
		return "", supervisor.ErrUnknownInstance
	}
	if name == "ready" {
		return supervisor.StateReady, nil
	}
	return supervisor.StateNeedsLogin, nil
}

// loginServer serves RegisterLogin under /internal, as the daemon wires it.
func loginServer(t *testing.T, svc LoginService, targets LoginTargets) *httptest.Server {
	t.Helper()
	gin.SetMode(gin.TestMode)
	r := gin.New()
	RegisterLogin(r.Group("/internal"), svc, targets, nil, slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

func TestLoginEndpoints(t *testing.T) {
	svc := &fakeLogins{shots: map[string][]byte{"acct-1": []byte("\x89PNG fake")}}
	srv := loginServer(t, svc, &fakeTargets{ports: map[string]int{"acct-1": 1, "acct-2": 2, "down": 0}})
	tests := []struct {
		name     string
		method   string
		path     string
		wantCode int
		wantType string
		wantBody string
	}{
		{"start", "POST", "/internal/auto-login/start?instance=acct-1", 202, "application/json",
			`{"name":"acct-1","state":"running","attempts":0,"last_error":"","started_at":"2026-01-02T03:04:05Z","finished_at":null,"page_url":"","page_snippet":""}`},
		{"start unknown", "POST", "/internal/auto-login/start?instance=ghost", 404, "application/json", "unknown instance ghost"},
		{"start unnamed", "POST", "/internal/auto-login/start", 400, "application/json", "instance is required"}, // the picking is Admin's, before the handler
		// Every instance, in order; acct-2 never tried a login.
		{"status", "GET", "/internal/auto-login/status", 200, "application/json", `{"browser":true,"instances":[{"name":"acct-1","state":"succeeded","attempts":1,`},
		{"status lists idle", "GET", "/internal/auto-login/status", 200, "application/json", `{"name":"acct-2","state":"idle","attempts":0,`},
		{"url", "GET", "/internal/auto-login/url?instance=acct-2", 200, "application/json", `{"url":"http://127.0.0.1:1/login?state=acct-2"}`},
		{"url unknown", "GET", "/internal/auto-login/url?instance=ghost", 404, "application/json", "unknown instance ghost"},
		{"url worker down", "GET", "/internal/auto-login/url?instance=down", 503, "application/json", "ask instance down for a login URL"},
		{"screenshot", "GET", "/internal/auto-login/acct-1/screenshot", 200, "image/png", "\x89PNG fake"},
		{"screenshot none", "GET", "/internal/auto-login/acct-2/screenshot", 404, "application/json", "no login screenshot for instance acct-2"},
		{"screenshot unknown", "GET", "/internal/auto-login/ghost/screenshot", 404, "application/json", "unknown instance ghost"},
		{"callback unknown", "GET", "/internal/auto-login/ghost/callback?state=x", 404, "application/json", "unknown instance ghost"},
		{"callback not running", "GET", "/internal/auto-login/down/callback?state=x", 503, "application/json", "instance down is not running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, ctype, body := do(t, tt.method, srv.URL+tt.path, nil)
			if code != tt.wantCode || !strings.HasPrefix(ctype, tt.wantType) || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %s %s, want %d %s containing %s", code, ctype, body, tt.wantCode, tt.wantType, tt.wantBody)
			}
		})
	}
	if got := strings.Join(svc.started, ","); got != "acct-1" {
		t.Errorf("got starts %q, want acct-1 only", got)
	}
}

// TestLoginWithoutBrowser: with no login runner the manual fallback still
// works and start says why it cannot.
func TestLoginWithoutBrowser(t *testing.T) {
	srv := loginServer(t, nil, &fakeTargets{ports: map[string]int{"acct-1": 1}})
	tests := []struct {
		name     string
		method   string
		path     string
		wantCode int
		wantBody string
	}{
		{"start", "POST", "/internal/auto-login/start?instance=acct-1", 503, "automatic login is not available"},
		{"status", "GET", "/internal/auto-login/status", 200, `{"browser":false,"instances":[{"name":"acct-1","state":"idle",`},
		{"url", "GET", "/internal/auto-login/url?instance=acct-1", 200, `{"url":"http://127.0.0.1:1/login?state=acct-1"}`},
		{"screenshot", "GET", "/internal/auto-login/acct-1/screenshot", 404, "no login screenshot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, body := do(t, tt.method, srv.URL+tt.path, nil)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %d %s, want %d containing %s", code, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

// TestLoginCallbackProxy forwards the operator's callback to the instance's
// own /auth/callback with the same query, without the admin credentials.
func TestLoginCallbackProxy(t *testing.T) {
	var (
		mu  sync.Mutex
		got *http.Request
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Clone(context.Background())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, `<p id="login-ok">Login successful</p>`)
	}))
	t.Cleanup(upstream.Close)
	u, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	srv := loginServer(t, &fakeLogins{}, &fakeTargets{ports: map[string]int{"acct-1": port}})

	query := "state=abc&auth=c0de&token=t%2Fk"
	code, ctype, body := do(t, "GET", srv.URL+"/internal/auto-login/acct-1/callback?"+query,
		map[string]string{"Authorization": "Bearer admin-secret", "Cookie": "sid=1", "Accept": "text/html",
			"X-Poolgate-Cluster-Token": "ct", "X-Poolgate-Forwarded-By": "r2", "X-Api-Key": "sk-1",
			"Proxy-Authorization": "Basic eA==", "X-Custom": "anything", "User-Agent": "browser/1"})
	if code != 200 || ctype != "text/html" || !strings.Contains(body, "Login successful") {
		t.Fatalf("got %d %s %s, want the worker's page", code, ctype, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.URL.Path != "/auth/callback" || got.URL.RawQuery != query {
		t.Errorf("got upstream %s?%s, want /auth/callback?%s", got.URL.Path, got.URL.RawQuery, query)
	}
	// The worker sees what a browser's redirect carries, nothing of
	// poolgate's: an allowlist, not a list of what to drop.
	for k := range got.Header {
		switch k {
		case "Accept", "User-Agent", "Accept-Encoding":
		default:
			t.Errorf("the worker saw header %s: %v", k, got.Header[k])
		}
	}
	if got.Header.Get("Accept") != "text/html" || got.Header.Get("User-Agent") != "browser/1" {
		t.Errorf("got upstream headers %v, want Accept and User-Agent kept", got.Header)
	}
}

// TestLoginCallbackUpstreamDown answers 502 when nothing listens.
func TestLoginCallbackUpstreamDown(t *testing.T) {
	ln := httptest.NewServer(http.NotFoundHandler())
	port, _ := strconv.Atoi(strings.TrimPrefix(ln.URL, "http://127.0.0.1:"))
	ln.Close() // the port is free now
	srv := loginServer(t, &fakeLogins{}, &fakeTargets{ports: map[string]int{"acct-1": port}})
	code, _, body := do(t, "GET", srv.URL+"/internal/auto-login/acct-1/callback?state=x", nil)
	if code != http.StatusBadGateway || !strings.Contains(body, "instance acct-1") {
		t.Errorf("got %d %s, want 502 naming the instance", code, body)
	}
}

func do(t *testing.T, method, u string, header map[string]string) (int, string, string) {
	t.Helper()
	req := request(method, u, "", nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, b := roundTrip(t, req)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") && !json.Valid(b) {
		t.Errorf("%s %s: invalid JSON %s", method, u, b)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}
