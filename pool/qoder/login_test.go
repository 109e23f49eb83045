package qoder_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// An account without a login runs the CLI's device login: it sits in
// needs_login with that process kept (no restarts), takes no turn, its
// login URL is the one the CLI printed, and the CLI's own status command
// agrees.
func TestLoggedOutWaitsForLogin(t *testing.T) {
	p := startPool(t, account(t, "q1", "", false))
	st := p.await(t, "q1", supervisor.StateNeedsLogin)
	// A second of health checks (every 100ms) later: the same process,
	// no restart, still waiting.
	first := st.CheckedAt
	testenv.WaitFor(t, 20*time.Second, "a second of health checks", func() bool {
		return p.status("q1").CheckedAt.Sub(first) > time.Second
	})
	if now := p.status("q1"); now.State != supervisor.StateNeedsLogin || now.Restarts != 0 || now.PID != st.PID {
		t.Fatalf("state %s, %d restarts, pid %d (was %d): want needs_login on the first process", now.State, now.Restarts, now.PID, st.PID)
	}
	if _, err := st.Backend.Start(context.Background(), ask("hello", "")); !errors.Is(err, chat.ErrNotLoggedIn) {
		t.Errorf("a turn: %v, want ErrNotLoggedIn", err)
	}
	u, err := st.Backend.LoginURL(context.Background())
	if err != nil || !deviceURL.MatchString(u) {
		t.Errorf("login URL %q (%v), want the device page's", u, err)
	}
	w, _ := p.sup.Worker("q1")
	if got := cliStatus(t, w.WorkDir()); got["logged_in"] != false {
		t.Errorf("qodercli status says %v, want logged_in false as the pool says", got)
	}
}

// deviceURL is the simulated device login's URL.
var deviceURL = regexp.MustCompile(`^http://127\.0\.0\.1:\d+/device/selectAccounts\?challenge=`)

// A stored login the CLI refuses (here, one kept under another machine
// id): the session answers "Not logged in" at its start, the account is
// logged out, and the next start runs the device login, once.
func TestRefusedStoredLogin(t *testing.T) {
	a := account(t, "q1", "", true)
	if err := os.WriteFile(filepath.Join(a.WorkDir, "config", ".auth", "machine_id"), []byte("m-other"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPool(t, a)
	var st supervisor.Status
	testenv.WaitFor(t, 20*time.Second, "q1 running its device login", func() bool {
		st = p.status("q1")
		u, _ := loginURL(st)
		return st.State == supervisor.StateNeedsLogin && deviceURL.MatchString(u)
	})
	if st.Restarts != 1 {
		t.Errorf("%d restarts, want 1 (the refused session, then the device login)", st.Restarts)
	}
}

func loginURL(st supervisor.Status) (string, error) {
	if st.Backend == nil {
		return "", chat.ErrWorkerGone
	}
	return st.Backend.LoginURL(context.Background())
}

// cliStatus runs the (simulated) CLI's status command in a work dir's
// config dir.
func cliStatus(t *testing.T, workDir string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "qoder", "status", "-o", "json")
	cmd.Env = []string{simEnv + "=1", "HOME=" + filepath.Join(workDir, "home"), "QODER_CONFIG_DIR=" + filepath.Join(workDir, "config")}
	out, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		t.Fatalf("status command: %v", err)
	}
	// Logged out, the command lingers after its answer, as the real one.
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var st map[string]any
	if err := json.NewDecoder(out).Decode(&st); err != nil {
		t.Fatalf("status printed no JSON: %v", err)
	}
	return st
}

// The device login: the URL `qodercli login` prints is the backend's login
// URL; once the page approved it, the account is restarted once, logged
// in, and serves.
func TestDeviceLogin(t *testing.T) {
	p := startPool(t, account(t, "q1", "", false))
	be := p.await(t, "q1", supervisor.StateNeedsLogin).Backend
	u, err := be.LoginURL(context.Background())
	if err != nil || !deviceURL.MatchString(u) {
		t.Fatalf("login URL %q (%v), want the device page's", u, err)
	}
	approve(t, u, "demo@example.com", "demo")
	st := p.await(t, "q1", supervisor.StateReady)
	if st.Restarts != 1 {
		t.Errorf("%d restarts, want 1 (the device login ends once the login is stored)", st.Restarts)
	}
	r := mustOK(t, "turn after login", run(t, st.Backend, ask("hello", "")))
	if r.text != "You said: hello" {
		t.Errorf("answer %q", r.text)
	}
	w, _ := p.sup.Worker("q1")
	if got := cliStatus(t, w.WorkDir()); got["logged_in"] != true || got["email"] != "demo@example.com" {
		t.Errorf("qodercli status says %v, want demo@example.com logged in", got)
	}
}

// approve signs in on the device page at u and approves the login, as a
// browser would.
func approve(t *testing.T, u, user, pass string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	page := get(t, c, u)
	base, _ := url.Parse(u)
	form := url.Values{"email": {user}, "password": {pass}}
	for _, m := range regexp.MustCompile(`name="(\w+)" value="([^"]*)"`).FindAllStringSubmatch(page, -1) {
		form.Set(m[1], m[2])
	}
	page = post(t, c, base.ResolveReference(&url.URL{Path: "/device/signin"}).String(), form)
	ticket := regexp.MustCompile(`name="ticket" value="(\w+)"`).FindStringSubmatch(page)
	if ticket == nil {
		t.Fatalf("no account picker after signing in:\n%s", page)
	}
	page = post(t, c, base.ResolveReference(&url.URL{Path: "/device/approve"}).String(),
		url.Values{"ticket": {ticket[1]}, "account": {"personal"}})
	if !strings.Contains(page, `id="login-ok"`) {
		t.Fatalf("approval page:\n%s", page)
	}
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) string {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A personal access token the CLI cannot use fails each start with the
// CLI's reason, and the worker is failed after FailAfter of them, not
// restarted forever.
func TestBadTokenFailsStart(t *testing.T) {
	p := startPool(t, account(t, "q1", "qoder_invalid_token", false))
	start := time.Now()
	var st supervisor.Status
	testenv.WaitFor(t, 30*time.Second, "q1 failed", func() bool {
		st = p.status("q1")
		return st.State == supervisor.StateFailed
	})
	if !strings.Contains(st.LastError, "personal access token") || !strings.Contains(st.LastError, "NetworkAttemptError: Network attempt failed at dns") {
		t.Errorf("last error %q, want the CLI's reason", st.LastError)
	}
	if st.Restarts != 2 {
		t.Errorf("%d restarts, want 2 (FailAfter 3)", st.Restarts)
	}
	t.Logf("failed after %s", time.Since(start).Round(time.Millisecond))
	if strings.Contains(p.log.String(), "qoder_invalid_token") {
		t.Error("the token is in the log")
	}
}
