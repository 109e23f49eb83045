package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// The admin API never listens on a network without credentials, whatever
// POOLGATE_INSECURE says: the daemon refuses to start.
func TestAdminListenerNeedsCredentials(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{"admin listener on all interfaces", []string{"POOLGATE_LISTEN=127.0.0.1:0", "POOLGATE_ADMIN_LISTEN=0.0.0.0:0"}},
		{"insecure API carrying the admin API", []string{"POOLGATE_LISTEN=0.0.0.0:0", "POOLGATE_INSECURE=true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			env := append(tt.give, "POOLGATE_DATA_DIR="+t.TempDir())
			err := serve(ctx, Options{}, func() []string { return env }, nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "POOLGATE_ADMIN_TOKEN") {
				t.Errorf("run = %v, want a refusal naming POOLGATE_ADMIN_TOKEN", err)
			}
		})
	}
}

// dumpEnv writes a wrapper script that saves its environment to out, then
// execs target with its arguments. The dump is renamed into place whole: a
// test that sees out reads all of it.
func dumpEnv(t *testing.T, out string, target ...string) string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "wrapper")
	quoted := make([]string, len(target))
	for i, a := range target {
		quoted[i] = "'" + a + "'"
	}
	body := fmt.Sprintf("#!/bin/sh\nenv > \"%[1]s.$$\" && mv \"%[1]s.$$\" \"%[1]s\"\nexec %[2]s \"$@\"\n", out,
		strings.Join(quoted, " "))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the child did not dump its environment: %v", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			m[k] = v
		}
	}
	return m
}

// No secret of the gateway reaches a child process: a worker sees an
// allowlist of poolgate's environment plus its own account's variables
// (never another account's, never a password variable, never the
// simulator's credentials when the worker is not the simulator), and
// Chromium sees none of poolgate's secrets.
func TestChildrenSeeNoSecrets(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("this test needs chromium: install it with 'apt-get install chromium' (make test does)")
	}
	dumps := t.TempDir()
	worker := dumpEnv(t, filepath.Join(dumps, "worker-$MINE.env"), testenv.PoolgateBin(t), "simworker")
	browser := dumpEnv(t, filepath.Join(dumps, "chromium.env"), chromium)
	accts, _ := json.Marshal([]map[string]any{
		{"name": "a1", "username": "alice", "password_env": "A1_PW", "env": map[string]string{"MINE": "a1"}},
		{"name": "a2", "username": "bob", "password_env": "A2_PW", "env": map[string]string{"MINE": "a2"}},
	})
	secretNames := []string{"POOLGATE_", "A1_PW", "A2_PW", "SIMWORKER_ACCOUNTS", "UNRELATED_SECRET"}
	secretValues := []string{"pw-one", "pw-two", "s3cret", "sk-secret", "adm-secret"}
	daemontest.StartDaemon(t, "POOLGATE_WORKER_BIN="+worker, "POOLGATE_CHROMIUM="+browser,
		"POOLGATE_ACCOUNTS="+string(accts), "A1_PW=pw-one", "A2_PW=pw-two", "UNRELATED_SECRET=s3cret",
		"POOLGATE_API_KEYS=sk-secret", "POOLGATE_ADMIN_TOKEN=adm-secret", "POOLGATE_HEALTH_INTERVAL=300ms",
		"POOLGATE_LOGIN_RECIPE=simworker") // the simulator's login page, though the worker binary is custom
	// Both workers start logged out: the pool runs Chromium to log them in.
	testenv.WaitFor(t, 60*time.Second, "both workers and a browser to dump their environment", func() bool {
		for _, f := range []string{"worker-a1.env", "worker-a2.env", "chromium.env"} {
			if _, err := os.Stat(filepath.Join(dumps, f)); err != nil {
				return false
			}
		}
		return true
	})
	for _, f := range []string{"worker-a1.env", "worker-a2.env", "chromium.env"} {
		env := readEnv(t, filepath.Join(dumps, f))
		for k, v := range env {
			for _, s := range secretNames {
				if strings.HasPrefix(k, s) {
					t.Errorf("%s: %s reached the child", f, k)
				}
			}
			for _, s := range secretValues {
				if strings.Contains(v, s) {
					t.Errorf("%s: %s holds a secret", f, k)
				}
			}
		}
		if env["PATH"] == "" {
			t.Errorf("%s: no PATH: the allowlist must keep what a program needs", f)
		}
	}
	if a1 := readEnv(t, filepath.Join(dumps, "worker-a1.env")); a1["MINE"] != "a1" {
		t.Errorf("worker a1 has MINE=%q, want its own account's variable", a1["MINE"])
	}
	if c := readEnv(t, filepath.Join(dumps, "chromium.env")); !strings.Contains(c["HOME"], "poolgate-login-") {
		t.Errorf("chromium HOME=%q, want its own throwaway profile dir", c["HOME"])
	}
}

// A worker is trusted with its own account only: a login URL it hands out
// for another host (a compromised worker, or a process squatting on its
// port) or for a local file never gets the password, nor shows up in the
// login status or a screenshot.
func TestLoginURLMustBeOnTheRecipesHosts(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"a local file", "file:///etc/passwd", "a file: address"},
		{"another host", "http://127.0.0.2:9/login?state=x", "http://127.0.0.2:9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := t.TempDir()
			accts, _ := json.Marshal([]map[string]string{{"name": "acct-1", "username": "alice", "password": "pw-secret-a"}})
			d := daemontest.StartDaemon(t, "POOLGATE_DATA_DIR="+dataDir, "POOLGATE_ACCOUNTS="+string(accts),
				"POOLGATE_WORKER_ARGS=--login-url="+tt.give, "POOLGATE_HEALTH_INTERVAL=300ms")
			var st struct {
				Instances []struct {
					Name        string `json:"name"`
					LastError   string `json:"last_error"`
					PageURL     string `json:"page_url"`
					PageSnippet string `json:"page_snippet"`
				} `json:"instances"`
			}
			testenv.WaitFor(t, 60*time.Second, "the login to fail", func() bool {
				d.GetJSON(t, "/internal/auto-login/status", "", &st)
				return len(st.Instances) == 1 && st.Instances[0].LastError != ""
			})
			in := st.Instances[0]
			if !strings.Contains(in.LastError, tt.want) || !strings.Contains(in.LastError, "does not list in hosts") {
				t.Errorf("last error %q, want it to name %q as not in the recipe's hosts", in.LastError, tt.want)
			}
			if strings.Contains(in.PageSnippet, "root:") || strings.Contains(in.PageURL, "passwd") {
				t.Errorf("the status shows the foreign page: url %q, snippet %q", in.PageURL, in.PageSnippet)
			}
			shots, _ := filepath.Glob(filepath.Join(dataDir, "workers", "acct-1", "login-screenshots", "*"))
			if len(shots) > 0 {
				t.Errorf("screenshots %v of a page the recipe does not allow", shots)
			}
		})
	}
}

// Without API keys (loopback only), a web page the operator opens must not
// drive the gateway: a simple cross-origin POST (text/plain, foreign Origin),
// a DNS-rebound Host, or a non-JSON body are refused; a local client, and the
// dashboard on its own origin, are served.
func TestBrowsersCannotDriveAnOpenGateway(t *testing.T) {
	d := daemontest.StartDaemon(t)
	d.WaitReady(t, 20*time.Second)
	self := "http://" + d.Addr
	tests := []struct {
		name       string
		method     string
		path       string
		header     map[string]string
		body       string
		wantStatus int
	}{
		{"cross-origin simple POST to drain", "POST", "/internal/pool/sim-1/drain",
			map[string]string{"Content-Type": "text/plain", "Origin": "http://evil.example", "Host": "evil.example:8080"}, "x", 403},
		{"foreign origin, JSON", "POST", "/v1/chat/completions",
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example"}, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 403},
		{"opaque origin", "POST", "/internal/pool/sim-1/drain", map[string]string{"Origin": "null"}, "", 403},
		{"DNS rebinding read", "GET", "/internal/pool", map[string]string{"Host": "rebind.example:8080"}, "", 403},
		{"text/plain body from a local client", "POST", "/v1/chat/completions",
			map[string]string{"Content-Type": "text/plain"}, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 415},
		{"cross-site fetch metadata", "GET", "/v1/models", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", 403},
		{"local client", "POST", "/v1/chat/completions",
			map[string]string{"Content-Type": "application/json"}, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200},
		{"the dashboard on its own origin", "GET", "/internal/pool", map[string]string{"Origin": self}, "", 200},
		{"localhost", "GET", "/v1/models", map[string]string{"Host": "localhost:8080"}, "", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, d.URL+tt.path, strings.NewReader(tt.body))
			for k, v := range tt.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("got %d %s, want %d", resp.StatusCode, b, tt.wantStatus)
			}
			if tt.wantStatus >= 400 && !strings.Contains(string(b), `"error"`) {
				t.Errorf("refusal %s is not in the protocol's error shape", b)
			}
		})
	}
	var snap struct {
		Instances []struct{ Name, State string } `json:"instances"`
	}
	d.GetJSON(t, "/internal/pool", "", &snap)
	for _, in := range snap.Instances {
		if in.State != "ready" {
			t.Errorf("%s is %s: a refused request changed the pool", in.Name, in.State)
		}
	}
}

// The profiler's listener has no credentials: loopback only (the config
// refuses anything else), and no web page may read it through a browser on
// the same machine (a rebound host name, a cross-origin request).
func TestProfilerAnswersOnlyLoopback(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	d := daemontest.StartDaemon(t, "POOLGATE_PPROF_LISTEN="+addr)
	d.WaitReady(t, 15*time.Second)
	get := func(host, origin string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/pprof/", nil)
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET pprof as %s: %v", host, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(addr, ""); st != http.StatusOK {
		t.Errorf("pprof on its own address: %d", st)
	}
	if st := get("localhost:6060", ""); st != http.StatusOK {
		t.Errorf("pprof as localhost: %d", st)
	}
	if st := get("attacker.example:6060", ""); st != http.StatusForbidden {
		t.Errorf("pprof under a rebound host name: %d, want 403", st)
	}
	if st := get(addr, "http://attacker.example"); st != http.StatusForbidden {
		t.Errorf("pprof from a web page: %d, want 403", st)
	}
}
