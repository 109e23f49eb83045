package agentcli_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// An account without a login is needs_login and stays there, without
// restarts, and refuses turns before sending them; its CLI's own login
// hands out a URL, and once the page granted the login the account is
// ready.
func TestLogin(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", ""))
	testenv.WaitFor(t, 15*time.Second, "needs_login", func() bool {
		return p.status("a1").State == supervisor.StateNeedsLogin
	})
	time.Sleep(time.Second) // five health checks
	st := p.status("a1")
	if st.State != supervisor.StateNeedsLogin || st.Restarts != 0 {
		t.Fatalf("logged out: %s with %d restarts, want needs_login without restarts", st.State, st.Restarts)
	}
	be := st.Backend
	if _, err := be.Start(context.Background(), ask("hello", "")); !errors.Is(err, chat.ErrNotLoggedIn) || !errors.Is(err, chat.ErrNotSent) {
		t.Errorf("a turn on a logged-out account: %v, want not logged in, not sent", err)
	}

	u, err := be.LoginURL(context.Background())
	if err != nil || !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("login URL %q (%v), want the simulated CLI's page", u, err)
	}
	signIn(t, u, "demo", "demo")
	w, _ := p.sup.Worker("a1")
	ok, err := w.LoginTarget().Confirm(context.Background())
	if err != nil || !ok {
		t.Fatalf("after the page granted the login, Confirm says %v (%v)", ok, err)
	}
	be = p.ready(t, "a1")
	mustOK(t, "after the login", run(t, be, ask("hello", "")))
}

// signIn fills the simulated login page at u, as the browser would.
func signIn(t *testing.T, u, user, pass string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	pu, _ := url.Parse(u)
	form := url.Values{"state": {pu.Query().Get("state")}, "username": {user}, "password": {pass}}
	resp, err = http.PostForm(pu.Scheme+"://"+pu.Host+"/login/submit", form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Request.URL.Path, "/auth/callback") {
		t.Fatalf("sign-in ended at %s with %d, want the callback", resp.Request.URL, resp.StatusCode)
	}
}

// A key the upstream refuses: each turn says so, the account goes to
// needs_login and stays there (the CLI's status command still counts the
// configured key as a login), with no restart.
func TestRefusedKey(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-invalid-key"))
	be := p.ready(t, "a1")
	r := run(t, be, ask("hello", ""))
	if !errors.Is(r.err, chat.ErrNotLoggedIn) {
		t.Fatalf("a refused key's turn: %v, want not logged in", r.err)
	}
	w, _ := p.sup.Worker("a1")
	w.Check()
	testenv.WaitFor(t, 5*time.Second, "needs_login", func() bool {
		return p.status("a1").State == supervisor.StateNeedsLogin
	})
	time.Sleep(time.Second)
	if st := p.status("a1"); st.State != supervisor.StateNeedsLogin || st.Restarts != 0 {
		t.Errorf("after the refusal: %s with %d restarts, want needs_login, none", st.State, st.Restarts)
	}
}

// A stored login the upstream refuses: the account stays logged out while
// the CLI's status says the same, and is logged in again once its own
// login stored a new one, although the status then says the same again.
func TestRefusedStoredLogin(t *testing.T) {
	acct := account(t, "a1", "")
	dir := filepath.Join(acct.WorkDir, "config")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := `{"claudeAiOauth":{"accessToken":"sk-ant-oat01-invalid","refreshToken":"r","expiresAt":4102444800000,` +
		`"scopes":["user:inference"],"subscriptionType":"pro"},"simEmail":"demo"}`
	if err := os.WriteFile(filepath.Join(dir, ".credentials.json"), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startPool(t, nil, acct)
	be := p.ready(t, "a1")
	if r := run(t, be, ask("hello", "")); !errors.Is(r.err, chat.ErrNotLoggedIn) {
		t.Fatalf("a refused stored login's turn: %v, want not logged in", r.err)
	}
	w, _ := p.sup.Worker("a1")
	w.Check()
	testenv.WaitFor(t, 5*time.Second, "needs_login", func() bool {
		return p.status("a1").State == supervisor.StateNeedsLogin
	})
	time.Sleep(time.Second)
	if st := p.status("a1"); st.State != supervisor.StateNeedsLogin {
		t.Fatalf("with the same stored login: %s, want needs_login", st.State)
	}
	u, err := be.LoginURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	signIn(t, u, "demo", "demo")
	if ok, err := w.LoginTarget().Confirm(context.Background()); err != nil || !ok {
		t.Fatalf("after a new login, Confirm says %v (%v)", ok, err)
	}
	mustOK(t, "after the new login", run(t, p.ready(t, "a1"), ask("hello", "")))
}
