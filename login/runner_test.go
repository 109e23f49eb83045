package login

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/browsertest"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// TestVariants logs in through every simulator login page with the one
// built-in recipe, two at a time in one runner.
func TestVariants(t *testing.T) {
	t.Parallel()
	m := metrics.New(prometheus.NewRegistry())
	r, logs := newTestRunner(t, Config{Concurrency: 2, Metrics: m})
	variants := []string{"plain", "twostep", "delayed", "org"}
	workers := make([]*simWorker, len(variants))
	for i, v := range variants {
		workers[i] = startSim(t, v, "alice:s3cret-pw,bob:other")
		r.Ensure(workers[i].target("acct-"+v, "alice", "s3cret-pw"))
	}
	for i, v := range variants {
		st := await(t, r, "acct-"+v)
		if st.State != StateSucceeded || st.Attempts != 1 || st.LastError != "" {
			t.Errorf("%s: got %+v, want succeeded after 1 attempt", v, st)
		}
		if st.StartedAt == nil || st.FinishedAt == nil || st.FinishedAt.Before(*st.StartedAt) {
			t.Errorf("%s: got times %v..%v, want both set and ordered", v, st.StartedAt, st.FinishedAt)
		}
		if got := workers[i].stats(t).Logins; got != 1 {
			t.Errorf("%s: got %d logins in the worker, want 1", v, got)
		}
	}
	user, err := os.ReadFile(filepath.Join(workers[3].ep.WorkDir, "cache", "user"))
	if err != nil || !bytes.Contains(user, []byte(`"acme"`)) {
		t.Errorf("org: got cache/user %q (%v), want the first organisation, acme", user, err)
	}
	var pb dto.Metric
	if err := m.LoginAttempts.WithLabelValues("success").Write(&pb); err != nil || pb.GetCounter().GetValue() != 4 {
		t.Errorf("got %v successful attempts in the metrics (%v), want 4", pb.GetCounter().GetValue(), err)
	}
	if strings.Contains(logs.String(), "s3cret-pw") {
		t.Errorf("the password is in the logs:\n%s", logs)
	}
}

// TestRecipeFileChoosesByText adds a recipe from a file that picks the
// organisation by its label and takes the password from password_env, in
// a stealth page.
func TestRecipeFileChoosesByText(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "recipes.yaml")
	doc := `recipes:
  sim-personal:
    hosts: [127.0.0.1]
    password_env: SIM_PW
    steps:
      - open: login_url
      - type: "#username"
        field: username
      - type: "#password"
        field: password
      - click: "#submit"
      - choose: ".org-option"
        text: personal
      - wait_text: Login successful
    failure:
      - text: Invalid username
`
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(k string) string {
		if k == "SIM_PW" {
			return "from-env"
		}
		return ""
	}
	r, _ := newTestRunner(t, Config{RecipeFile: file, Getenv: getenv, Stealth: true})
	w := startSim(t, "org", "carol:from-env")
	tg := w.target("acct-1", "carol", "")
	tg.Recipe = "sim-personal"
	r.Ensure(tg)
	if st := await(t, r, "acct-1"); st.State != StateSucceeded {
		t.Fatalf("got %+v, want succeeded", st)
	}
	user, err := os.ReadFile(filepath.Join(w.ep.WorkDir, "cache", "user"))
	if err != nil || !bytes.Contains(user, []byte(`"personal"`)) {
		t.Errorf("got cache/user %q (%v), want organisation personal", user, err)
	}
}

// TestWrongPassword ends failed after exactly MaxAttempts attempts, with the
// page's error, a screenshot per attempt (only the newest kept) and no
// trace of the password.
func TestWrongPassword(t *testing.T) {
	t.Parallel()
	const pass = "wrong&pw"
	r, logs := newTestRunner(t, Config{MaxAttempts: 3, Screenshots: 2})
	w := startSim(t, "twostep", "alice:right")
	tg := w.target("acct-1", "alice", pass)
	r.Ensure(tg)
	st := await(t, r, "acct-1")
	if st.State != StateFailed || st.Attempts != 3 {
		t.Fatalf("got %+v, want failed after 3 attempts", st)
	}
	if !strings.Contains(st.PageSnippet, "Invalid username or password") ||
		!strings.Contains(st.LastError, "Invalid username or password") {
		t.Errorf("got error %q, snippet %q; want the page's error in both", st.LastError, st.PageSnippet)
	}
	if !strings.Contains(st.PageURL, "/login/submit") {
		t.Errorf("got page URL %q, want the submit page", st.PageURL)
	}
	if hits := w.stats(t).LoginPageHits; hits != 3 {
		t.Errorf("got %d login page hits, want 3", hits)
	}
	shots, err := listShots(shotDir(w.ep.WorkDir))
	if err != nil || len(shots) != 2 {
		t.Fatalf("got screenshots %v (%v), want the newest 2", shots, err)
	}
	png, err := r.Screenshot("acct-1")
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Errorf("Screenshot: got %d bytes (%v), want a PNG", len(png), err)
	}
	all, _ := json.Marshal(r.All())
	for _, leak := range []string{logs.String(), string(all), strings.Join(shots, " ")} {
		if strings.Contains(leak, pass) || strings.Contains(leak, "wrong%26pw") {
			t.Errorf("the password leaked: %s", leak)
		}
	}
	// Ensure does not retry a rejected login by itself; Start does.
	r.Ensure(tg)
	if st, _ := r.Status("acct-1"); st.State != StateFailed {
		t.Errorf("Ensure after a rejection: got %s, want failed", st.State)
	}
	if st := r.Start(tg); st.State != StateRunning || st.Attempts != 0 {
		t.Errorf("Start: got %+v, want running from 0 attempts", st)
	}
	// The cleanup's Close cancels this login wherever it is.
}

// TestConcurrencyLimit runs three logins through one browser slot: their
// browsers (each with its own profile dir, made before the launch and
// removed after the exit) never overlap.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	r, _ := newTestRunner(t, Config{Concurrency: 1})
	names := []string{"a", "b", "c"}
	for _, n := range names {
		r.Ensure(startSim(t, "plain", "user:pass-word").target(n, "user", "pass-word"))
	}
	peak, seen := 0, 0
	for running := true; running; time.Sleep(5 * time.Millisecond) {
		dirs, _ := filepath.Glob(filepath.Join(r.cfg.TempDir, "poolgate-login-*"))
		peak = max(peak, len(dirs))
		seen += min(len(dirs), 1)
		running = false
		for _, st := range r.All() {
			running = running || st.State == StateRunning
		}
	}
	for _, st := range r.All() {
		if st.State != StateSucceeded {
			t.Errorf("%s: got %+v, want succeeded", st.Name, st)
		}
	}
	if peak != 1 || seen == 0 {
		t.Errorf("got at most %d browsers at once (seen in %d samples), want 1", peak, seen)
	}
}

// TestCloseKillsBrowser closes the runner while a login waits on a page
// that never comes: the login ends and no process is left.
func TestCloseKillsBrowser(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "recipes.yaml")
	doc := "recipes:\n  stuck:\n    hosts: [127.0.0.1, localhost]\n    steps:\n      - open: login_url\n      - wait: \"#never\"\n"
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ := newTestRunner(t, Config{RecipeFile: file, DefaultRecipe: "stuck", StepTimeout: time.Minute})
	w := startSim(t, "plain", "user:pass-word")
	r.Ensure(w.target("acct-1", "user", "pass-word"))
	deadline := time.Now().Add(wait)
	for w.stats(t).LoginPageHits == 0 { // the browser is up and on the page
		if time.Now().After(deadline) {
			t.Fatal("the browser never opened the login page")
		}
		time.Sleep(20 * time.Millisecond)
	}
	begin := time.Now()
	r.Close()
	if d := time.Since(begin); d > 10*time.Second {
		t.Errorf("Close took %s", d)
	}
	if procs := processesMentioning(r.cfg.TempDir); len(procs) > 0 {
		t.Fatalf("processes left after Close: %v", procs)
	}
	st, _ := r.Status("acct-1")
	if st.State != StateFailed || !strings.Contains(st.LastError, "cancelled") {
		t.Errorf("got %+v, want failed as cancelled", st)
	}
	if dirs, _ := filepath.Glob(filepath.Join(r.cfg.TempDir, "poolgate-login-*")); len(dirs) > 0 {
		t.Errorf("profile dirs left: %v", dirs)
	}
	r.Ensure(w.target("acct-1", "user", "pass-word")) // a no-op after Close
	if st, _ := r.Status("acct-1"); st.State != StateFailed {
		t.Errorf("Ensure after Close: got %s, want failed", st.State)
	}
}

// TestEnsureIsIdempotent: calls while a login runs start nothing more, and
// an instance the worker says is logged in needs no browser.
func TestEnsureIsIdempotent(t *testing.T) {
	r, _ := newTestRunner(t, Config{})
	release := make(chan struct{})
	var urls atomic.Int32
	tg := supervisor.LoginTarget{
		Instance: "acct-1",
		LoginURL: func(ctx context.Context) (string, error) {
			urls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "", errors.New("no URL today")
		},
		Confirm: func(context.Context) (bool, error) { return false, nil },
	}
	tg.Account.Username, tg.Account.Password = "user", "pass-word"
	for range 5 {
		r.Ensure(tg)
	}
	close(release)
	st := await(t, r, "acct-1")
	if st.State != StateFailed || st.Attempts != 3 || urls.Load() != 3 {
		t.Errorf("got %+v after %d URL requests, want failed after 3 attempts", st, urls.Load())
	}
	if !strings.Contains(st.LastError, "no URL today") {
		t.Errorf("got error %q, want the worker's", st.LastError)
	}
	tg.Confirm = func(context.Context) (bool, error) { return true, nil }
	if st := r.Start(tg); st.State != StateRunning {
		t.Errorf("Start: got %s, want running", st.State)
	}
	if st := await(t, r, "acct-1"); st.State != StateSucceeded || urls.Load() != 3 {
		t.Errorf("got %+v after %d URL requests, want succeeded without a new URL", st, urls.Load())
	}
}

func TestNewRunnerErrors(t *testing.T) {
	tests := []struct {
		name string
		give Config
		want string
	}{
		{"missing browser", Config{Chromium: "/nonexistent/chromium"}, "install chromium"},
		{"unknown default recipe", Config{DefaultRecipe: "nope"}, "unknown login recipe"},
		{"missing recipe file", Config{RecipeFile: "/nonexistent.yaml"}, "recipe file"},
	}
	bin := browsertest.Chromium(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.give
			if cfg.Chromium == "" {
				cfg.Chromium = bin
			}
			_, err := NewRunner(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
