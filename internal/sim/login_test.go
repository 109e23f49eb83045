package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// browser is a net/http client with a cookie jar that follows redirects.
type browser struct {
	t *testing.T
	c *http.Client
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, c: &http.Client{Jar: jar, Timeout: wait}}
}

// fetched is the final status, URL and body after redirects.
type fetched struct {
	status int
	url    string
	body   string
}

func (b *browser) do(req *http.Request, err error) fetched {
	b.t.Helper()
	if err != nil {
		b.t.Fatal(err)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return fetched{status: resp.StatusCode, url: resp.Request.URL.String(), body: string(body)}
}

func (b *browser) get(u string) fetched {
	b.t.Helper()
	return b.do(http.NewRequest(http.MethodGet, u, nil))
}

func (b *browser) post(u string, form url.Values) fetched {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err == nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return b.do(req, err)
}

func mustContain(t *testing.T, what string, f fetched, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(f.body, p) {
			t.Fatalf("%s (status %d): body lacks %q:\n%s", what, f.status, p, f.body)
		}
	}
}

// loginURL asks the simulator for a login URL over the Lingma protocol.
func loginURL(t *testing.T, c *client) (string, string) {
	t.Helper()
	var gen struct {
		LoginURL string `json:"loginUrl"`
		Nonce    string `json:"nonce"`
	}
	c.result("login/generateUrl", map[string]any{"loginDedicatedType": ""}, &gen)
	return gen.LoginURL, gen.Nonce
}

var ticketRE = regexp.MustCompile(`name="ticket" value="([0-9a-f]+)"`)

func TestLoginFlow(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantOrg string
		steps   func(t *testing.T, b *browser, base, start, state string) fetched
	}{
		{"plain", LoginPlain, "", func(t *testing.T, b *browser, base, start, state string) fetched {
			mustContain(t, "login page", b.get(start), `id="username"`, `id="password"`, `id="submit"`)
			return b.post(base+"/login/submit", url.Values{"state": {state}, "username": {"demo"}, "password": {"demo"}})
		}},
		{"twostep", LoginTwoStep, "", func(t *testing.T, b *browser, base, start, state string) fetched {
			mustContain(t, "step 1", b.get(start), `id="username"`, `id="next"`)
			step2 := b.post(base+"/login/submit", url.Values{"state": {state}, "step": {"user"}, "username": {"demo"}})
			mustContain(t, "step 2", step2, `id="password"`, `id="submit"`)
			return b.post(base+"/login/submit", url.Values{"state": {state}, "username": {"demo"}, "password": {"demo"}})
		}},
		{"delayed", LoginDelayed, "", func(t *testing.T, b *browser, base, start, state string) fetched {
			mustContain(t, "delayed page", b.get(start), `<template id="form-tpl">`, "800")
			return b.post(base+"/login/submit", url.Values{"state": {state}, "username": {"demo"}, "password": {"demo"}})
		}},
		{"org", LoginOrg, "acme", func(t *testing.T, b *browser, base, start, state string) fetched {
			b.get(start)
			picker := b.post(base+"/login/submit", url.Values{"state": {state}, "username": {"demo"}, "password": {"demo"}})
			mustContain(t, "org picker", picker, `class="org-option"`, "Acme", "Personal")
			m := ticketRE.FindStringSubmatch(picker.body)
			if m == nil {
				t.Fatalf("no ticket in org page:\n%s", picker.body)
			}
			return b.post(base+"/login/org", url.Values{"ticket": {m[1]}, "org": {"acme"}})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSim(t, "--login-page="+tt.give)
			c := dial(t, h)
			start, state := loginURL(t, c)
			b := newBrowser(t)
			done := tt.steps(t, b, h.baseURL(), start, state)
			mustContain(t, "callback", done, `id="login-ok"`, "Login successful")
			var st authStatus
			c.result("auth/status", map[string]any{}, &st)
			if st.Status != 2 || st.Name != "demo" {
				t.Errorf("auth/status after login = %+v, want status 2 for demo", st)
			}
			var u userFile
			raw, _ := os.ReadFile(filepath.Join(h.dir, "cache", "user"))
			if err := json.Unmarshal(raw, &u); err != nil || u.Org != tt.wantOrg || time.Until(u.ExpiresAt) < 59*24*time.Hour {
				t.Errorf("cache/user = %s (err %v), want org %q and ~60 days", raw, err, tt.wantOrg)
			}
			if again := b.get(done.url); again.status != http.StatusBadRequest {
				t.Errorf("callback replay status = %d, want 400", again.status)
			}
			if st := h.stats(t); st.LoginPageHits != 1 || st.Logins != 1 {
				t.Errorf("stats = %+v, want 1 login page hit and 1 login", st)
			}
		})
	}
}

func TestLoginWrongPassword(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string // a field the error page offers again
	}{
		{"plain", LoginPlain, `id="username"`},
		{"twostep", LoginTwoStep, `id="password"`},
		{"org", LoginOrg, `id="username"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSim(t, "--login-page="+tt.give)
			c := dial(t, h)
			_, state := loginURL(t, c)
			b := newBrowser(t)
			got := b.post(h.baseURL()+"/login/submit", url.Values{"state": {state}, "username": {"demo"}, "password": {"nope"}})
			mustContain(t, "error page", got, `<div class="error" id="login-error">Invalid username or password</div>`, tt.want)
			if got.status != http.StatusOK {
				t.Errorf("status = %d, want 200", got.status)
			}
			var st authStatus
			c.result("auth/status", map[string]any{}, &st)
			if st.Status != 1 {
				t.Errorf("auth/status = %+v, want 1", st)
			}
		})
	}
}

func TestLoginInvalidState(t *testing.T) {
	h := startSim(t)
	b := newBrowser(t)
	tests := []struct {
		name string
		give func() fetched
	}{
		{"login page", func() fetched { return b.get(h.baseURL() + "/login?state=bogus") }},
		{"submit", func() fetched {
			return b.post(h.baseURL()+"/login/submit", url.Values{"state": {"bogus"}, "username": {"demo"}, "password": {"demo"}})
		}},
		{"callback", func() fetched { return b.get(h.baseURL() + "/auth/callback?state=bogus&auth=x&token=y") }},
		{"org", func() fetched { return b.post(h.baseURL()+"/login/org", url.Values{"ticket": {"x"}, "org": {"acme"}}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.give()
			if got.status != http.StatusBadRequest || !strings.Contains(got.body, "invalid state") {
				t.Errorf("got %d %q, want 400 invalid state", got.status, got.body)
			}
		})
	}
}

func TestMachineIDStable(t *testing.T) {
	dir := t.TempDir()
	h1 := startSimIn(t, dir, "--logged-in")
	id1, err := os.ReadFile(filepath.Join(h1.dir, "cache", "id"))
	if err != nil || len(id1) == 0 {
		t.Fatalf("cache/id after start: %q, %v", id1, err)
	}
	h2 := startSimIn(t, dir)
	var st authStatus
	dial(t, h2).result("auth/status", map[string]any{}, &st)
	if st.Status != 2 || st.ID != string(id1) {
		t.Errorf("restarted auth/status = %+v, want status 2 with id %s", st, id1)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "cache"))
	if len(entries) != 2 {
		t.Errorf("cache holds %d entries, want id and user only (no temp files)", len(entries))
	}
}
