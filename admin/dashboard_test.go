package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-rod/rod"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/internal/browsertest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/pool/worker"
)

const adminToken = "adm-dashboard-token"

// TestDashboard drives /admin in a real headless Chromium against a real
// pool of two simworker processes: wrong token, the instance list, the
// optional login and stats parts, Log in, Export and Restart.
func TestDashboard(t *testing.T) {
	chromium := findChromium(t)
	p, sup, srv, logins := startAdmin(t)

	checkPageHeaders(t, srv.URL)

	page := openPage(t, chromium)
	page.Timeout(15 * time.Second).MustNavigate(srv.URL + "/admin").MustWaitLoad()

	// A wrong token is said to be wrong, and not kept.
	typeToken(t, page, "not-the-token")
	waitJS(t, page, "the wrong-token message",
		`() => { const e = document.getElementById("error"); return !e.hidden && e.textContent.includes("Wrong token"); }`)
	if got := page.MustEval(`() => sessionStorage.getItem("poolgate.adminToken")`); !got.Nil() {
		t.Errorf("a rejected token is still in sessionStorage: %v", got)
	}

	typeToken(t, page, adminToken)
	waitJS(t, page, "both instances listed as ready", `() => {
		const s = [...document.querySelectorAll("#instances tbody td.state-cell span")].map(e => e.textContent);
		return s.length === 2 && s.every(x => x === "ready");
	}`)
	if info := page.MustInfo(); strings.Contains(info.URL, adminToken) {
		t.Errorf("the token is in the page URL %s", info.URL)
	}

	// The optional parts: login states and pool-wide stats.
	waitJS(t, page, "the login state of w2",
		`() => document.querySelector('tr[data-instance="w2"] td.login').textContent.startsWith("failed")`)
	if got := page.MustElement("#m-hitrate").MustText(); got != "75.0%" {
		t.Errorf("cache hit rate card = %q, want %q", got, "75.0%")
	}
	if got := page.MustElement("#m-rejections").MustText(); got != "3" {
		t.Errorf("rejections card = %q, want %q", got, "3")
	}

	click(t, page, `tr[data-instance="w2"] button.act-login`)
	testenv.WaitFor(t, 5*time.Second, "a login start for w2", func() bool { return logins.started("w2") })

	// Export downloads the bundle JSON.
	dlDir := t.TempDir()
	wait := page.Browser().Timeout(10 * time.Second).WaitDownload(dlDir)
	click(t, page, `tr[data-instance="w1"] button.act-export`)
	checkDownload(t, filepath.Join(dlDir, wait().GUID))

	// Restart w1: the pool shows a new process, then so does the page.
	before := instanceOf(p, "w1")
	click(t, page, `tr[data-instance="w1"] button.act-restart`)
	var after route.InstanceStatus
	testenv.WaitFor(t, 20*time.Second, "w1 restarted with a new pid and ready", func() bool {
		after = instanceOf(p, "w1")
		return after.Restarts > before.Restarts && after.PID != 0 && after.PID != before.PID && after.State == supervisor.StateReady
	})
	waitJS(t, page, "the page showing w1's new pid and restart count", `(pid, restarts) => {
		const r = document.querySelector('tr[data-instance="w1"]');
		return r && r.querySelector("td.pid").textContent === pid &&
			r.querySelector("td.restarts").textContent === restarts &&
			r.querySelector("td.state-cell span").textContent === "ready";
	}`, strconv.Itoa(after.PID), strconv.Itoa(after.Restarts))
	if got := instanceOf(p, "w2"); got.Restarts != 0 {
		t.Errorf("w2 restarts = %d, want 0 (only w1 was restarted)", got.Restarts)
	}

	// A stale cooldown: the row shows it with a Clear button, which ends
	// it; Probe ends one with a real turn.
	for _, act := range []string{"clear", "probe"} {
		name := coolDown(t, p)
		waitJS(t, page, "the cooldown of "+name+" with its Clear button", `(name) => {
			const r = document.querySelector('tr[data-instance="' + name + '"]');
			return r.querySelector("td.cooldown").textContent.endsWith("s") && !r.querySelector("button.act-clear").hidden;
		}`, name)
		click(t, page, `tr[data-instance="`+name+`"] button.act-`+act)
		testenv.WaitFor(t, 10*time.Second, act+" ending the cooldown of "+name, func() bool {
			return instanceOf(p, name).CooldownUntil == nil && instanceOf(p, name).State == supervisor.StateReady
		})
		waitJS(t, page, "the row without a cooldown", `(name) => {
			const r = document.querySelector('tr[data-instance="' + name + '"]');
			return r.querySelector("td.cooldown").textContent === "-" && r.querySelector("button.act-clear").hidden;
		}`, name)
		if act == "probe" {
			waitJS(t, page, "the probe's notice", `() => document.getElementById("notice").textContent.includes("back in rotation")`)
		}
	}

	saveScreenshot(t, page, "dashboard.png")

	// Only the core admin API (the endpoints Register itself adds): the
	// parts whose endpoint answers 404 hide (the usage views too), the rest
	// works.
	bare, hasLogin, hasStats := startBareAdmin(t, p, sup)
	page.Timeout(15 * time.Second).MustNavigate(bare.URL + "/admin").MustWaitLoad()
	typeToken(t, page, adminToken)
	waitJS(t, page, "the instances, with only the parts the server has", `(hasLogin, hasStats) => {
		const rows = document.querySelectorAll("#instances tbody tr");
		const shown = (sel) => [...document.querySelectorAll(sel)].some(e => !e.hidden);
		return rows.length === 2 && shown(".login-col") === hasLogin && shown("button.act-login") === hasLogin &&
			shown(".stats-only") === hasStats && document.getElementById("error").hidden &&
			document.getElementById("usage").hidden && document.getElementById("requests").hidden;
	}`, hasLogin, hasStats)
}

// startBareAdmin serves only the core admin API and the page over p, and
// says whether that includes the login status and stats endpoints.
func startBareAdmin(t *testing.T, p *route.Pool, sup *supervisor.Supervisor) (_ *httptest.Server, hasLogin, hasStats bool) {
	t.Helper()
	eng := gin.New()
	eng.Use(admin.Edge(adminToken))
	adm := admin.New(admin.Config{}, p, sup, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	adm.Register(eng)
	adm.RegisterDashboard(eng)
	srv := httptest.NewServer(eng)
	t.Cleanup(srv.Close)
	return srv, hasRoute(eng, http.MethodGet, "/internal/auto-login/status"), hasRoute(eng, http.MethodGet, "/internal/stats")
}

// startAdmin serves the admin surface over a real pool of two simworkers,
// with a fake login service and, unless the build has them, stand-ins for
// the /internal/stats and session export endpoints.
func startAdmin(t *testing.T) (*route.Pool, *supervisor.Supervisor, *httptest.Server, *fakeLogins) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	drv := lingma.New(lingma.Config{Command: []string{testenv.PoolgateBin(t), "simworker"}, ExtraArgs: []string{"--logged-in", "--directives"}})
	launcher := &supervisor.ExecLauncher{}
	p := route.New(route.Config{}, nil, log)
	sup := supervisor.New(p.Watch(supervisor.Config{}), supervisortest.Drive(drv, []supervisor.WorkerConfig{workerConfig(t, "w1"), workerConfig(t, "w2")}), launcher, nil, log)
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		p.Shutdown(sctx)
		sup.Shutdown()
		cancel()
		launcher.Close()
	})

	gin.SetMode(gin.TestMode)
	eng := gin.New()
	eng.Use(admin.Edge(adminToken))
	adm := admin.New(admin.Config{}, p, sup, prometheus.NewRegistry(), log)
	adm.RegisterProbes(eng)
	in := adm.Register(eng)
	adm.RegisterDashboard(eng)
	logins := &fakeLogins{}
	if !hasRoute(eng, http.MethodGet, "/internal/auto-login/status") {
		admin.RegisterLogin(in, logins, sup, nil, log)
	}
	if !hasRoute(eng, http.MethodGet, "/internal/stats") {
		in.GET("/stats", func(c *gin.Context) {
			c.JSON(http.StatusOK, gin.H{
				"requests":                gin.H{"total": 12},
				"tokens":                  gin.H{"input": 100, "output": 40},
				"cache":                   gin.H{"hits": 3, "misses": 1, "hit_rate": 0.75},
				"concurrency":             gin.H{"in_flight": 0, "queue_depth": 0, "max_in_flight": 64, "max_queue": 256},
				"backpressure_rejections": 3,
			})
		})
	}
	if !hasRoute(eng, http.MethodPost, "/internal/session/export") {
		in.POST("/session/export", func(c *gin.Context) {
			c.JSON(http.StatusOK, gin.H{"instance": c.Query("instance"), "account": c.Query("instance"), "bundle": "c2VhbGVk", "bytes": 6})
		})
	}
	srv := httptest.NewServer(eng)
	t.Cleanup(srv.Close)

	testenv.WaitFor(t, 20*time.Second, "two ready instances", func() bool {
		return instanceOf(p, "w1").State == supervisor.StateReady && instanceOf(p, "w2").State == supervisor.StateReady
	})
	return p, sup, srv, logins
}

func workerConfig(t *testing.T, name string) supervisor.WorkerConfig {
	return supervisor.WorkerConfig{Name: name, Account: worker.Account{Name: name, Env: []string{"SIMWORKER_ACCOUNTS=u-" + name + ":pw"}},
		WorkDir: t.TempDir(), StartTimeout: 10 * time.Second, HealthInterval: 200 * time.Millisecond,
		HealthTimeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, StopGrace: 2 * time.Second}
}

func hasRoute(eng *gin.Engine, method, path string) bool {
	for _, r := range eng.Routes() {
		if r.Method == method && r.Path == path {
			return true
		}
	}
	return false
}

// checkPageHeaders: the page loads without credentials and with its
// security headers; the data behind it does not.
func checkPageHeaders(t *testing.T, base string) {
	t.Helper()
	res, err := http.Get(base + "/admin")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "<title>poolgate</title>") {
		t.Fatalf("GET /admin without credentials = %d, want 200 and the page", res.StatusCode)
	}
	tests := []struct{ give, want string }{
		{"Content-Type", "text/html; charset=utf-8"},
		{"Referrer-Policy", "no-referrer"},
		{"X-Content-Type-Options", "nosniff"},
		{"X-Frame-Options", "DENY"},
	}
	for _, tt := range tests {
		if got := res.Header.Get(tt.give); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.give, got, tt.want)
		}
	}
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "script-src 'sha256-", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("Content-Security-Policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") || strings.Contains(string(body), "http://") || strings.Contains(string(body), "https://") {
		t.Errorf("the page allows unsafe-inline or loads something from elsewhere")
	}
	res, err = http.Get(base + "/internal/pool")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /internal/pool without a token = %d, want 401", res.StatusCode)
	}
}

// The browser helpers, shared with cmd/poolgate/internal/daemon's dashboard tests.
var (
	findChromium   = browsertest.Chromium
	openPage       = browsertest.Open
	click          = browsertest.Click
	waitJS         = browsertest.WaitJS
	saveScreenshot = browsertest.Screenshot
)

func typeToken(t *testing.T, page *rod.Page, token string) {
	t.Helper()
	el, err := page.Timeout(10 * time.Second).Element("#token")
	if err == nil {
		err = el.Input(token)
	}
	if err != nil {
		t.Fatalf("type the token: %v", err)
	}
	click(t, page, "#connect")
}

func checkDownload(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the exported bundle was not downloaded: %v", err)
	}
	var got struct {
		Instance string `json:"instance"`
		Bundle   string `json:"bundle"`
	}
	if err := json.Unmarshal(b, &got); err != nil || got.Instance != "w1" || got.Bundle == "" {
		t.Errorf("downloaded %q (%v), want the export JSON of w1", b, err)
	}
}

// fakeLogins stands in for the login runner: w2 has a failed attempt.
type fakeLogins struct {
	mu    sync.Mutex
	calls []string
}

var _ admin.LoginService = (*fakeLogins)(nil)

func (f *fakeLogins) Start(target supervisor.LoginTarget) login.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, target.Instance)
	return login.Status{Name: target.Instance, State: login.StateRunning, Attempts: 2}
}

func (f *fakeLogins) started(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if c == name {
			return true
		}
	}
	return false
}

func (f *fakeLogins) Status(name string) (login.Status, bool) {
	for _, s := range f.All() {
		if s.Name == name {
			return s, true
		}
	}
	return login.Status{}, false
}

func (f *fakeLogins) All() []login.Status {
	return []login.Status{
		{Name: "w1", State: login.StateSucceeded, Attempts: 1},
		{Name: "w2", State: login.StateFailed, Attempts: 1, LastError: "the login page did not load"},
	}
}

func (f *fakeLogins) Screenshot(string) ([]byte, error) { return nil, login.ErrNoScreenshot }

// coolDown sends a turn that every worker answers with a ten-minute rate
// limit, and returns the instance it cooled down.
func coolDown(t *testing.T, p *route.Pool) string {
	t.Helper()
	r := route.NewRouter(route.RouterConfig{Count: func(s string) int { return len(s) }}, p, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.Open(ctx, route.Call{Request: &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "[[sim:ratelimit=10m]]"}}}})
	var rl *chat.RateLimitedError
	if !errors.As(err, &rl) {
		t.Fatalf("rate-limited turn: %v", err)
	}
	r.Wait()
	for _, in := range p.Snapshot().Instances {
		if in.CooldownUntil != nil {
			return in.Name
		}
	}
	t.Fatal("no instance cooled down")
	return ""
}

func instanceOf(p *route.Pool, name string) route.InstanceStatus {
	in, _ := p.Snapshot().Instance(name)
	return in
}
