package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// errLoggedOut is the status command's exit when logged out (status 1, as
// the real one exits).
var errLoggedOut = errors.New("not logged in")

// auth runs Claude Code's `auth status` or `auth login`.
func (e *agentEnv) auth(ctx context.Context, args []string) error {
	switch {
	case len(args) >= 1 && args[0] == "status" && (len(args) == 1 || len(args) == 2 && (args[1] == "--json" || args[1] == "--text")):
		return e.authStatus(len(args) == 2 && args[1] == "--text")
	case len(args) == 1 && args[0] == "login":
		return e.authLogin(ctx)
	}
	quoted, _ := json.Marshal(args)
	return e.refuse(fmt.Sprintf("error: unknown command 'auth %s'", quoted))
}

// authStatus prints the login state in the real CLI's shape.
func (e *agentEnv) authStatus(text bool) error {
	method, source := e.login()
	if text {
		if method == "none" {
			fmt.Fprintln(e.stdout, "Not logged in. Run claude auth login to authenticate.")
			return errLoggedOut
		}
		fmt.Fprintln(e.stdout, "Logged in ("+method+")")
		return nil
	}
	st := map[string]any{"loggedIn": method != "none", "authMethod": method, "apiProvider": "firstParty",
		"analyticsDisabled": true, "projectsDirectory": filepath.Join(e.configDir, "projects"),
		"configDirectory": e.configDir, "loginExpiresAt": nil, "consoleProfileSignInOffered": true}
	switch method {
	case "api_key":
		st["apiKeySource"] = source
	case "claude.ai":
		if c, err := e.readCreds(); err == nil {
			st["email"], st["subscriptionType"], st["storedClaudeAiLogin"] = c.Email, "pro", true
		}
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	fmt.Fprintln(e.stdout, string(b))
	if method == "none" {
		return errLoggedOut
	}
	return nil
}

// storedLogin is the simulated credentials file: the real one's
// claudeAiOauth object, and the account that logged in.
type storedLogin struct {
	OAuth struct {
		AccessToken      string   `json:"accessToken"`
		RefreshToken     string   `json:"refreshToken"`
		ExpiresAt        int64    `json:"expiresAt"`
		Scopes           []string `json:"scopes"`
		SubscriptionType string   `json:"subscriptionType"`
	} `json:"claudeAiOauth"`
	Email string `json:"simEmail,omitempty"`
}

func (e *agentEnv) readCreds() (storedLogin, error) {
	var c storedLogin
	b, err := os.ReadFile(filepath.Join(e.configDir, e.d.credFile))
	if err != nil {
		return c, err
	}
	return c, json.Unmarshal(b, &c)
}

// authLogin serves the simulator's login page on loopback, prints its URL
// as the CLI prints its own, and waits for the browser: a login the page
// grants is stored in the config dir's credentials file. Another dialect's
// login command can call it as it is.
func (e *agentEnv) authLogin(ctx context.Context) error {
	cfg := Config{Protocol: ProtocolLingma, WorkDir: filepath.Join(e.configDir, "sim-login")}
	if _, err := parseAccounts(e.getenv("SIMWORKER_ACCOUNTS"), &cfg); err != nil {
		return err
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(e.stderr, nil)))
	if err != nil {
		return err
	}
	done := make(chan struct{})
	var once sync.Once
	s.onLogin = func(user, _ string) error {
		var c storedLogin
		c.OAuth.AccessToken, c.OAuth.RefreshToken = "sk-ant-oat01-sim-"+randomHex(8), "sk-ant-ort01-sim-"+randomHex(8)
		c.OAuth.ExpiresAt = time.Now().Add(365 * 24 * time.Hour).UnixMilli()
		c.OAuth.Scopes, c.OAuth.SubscriptionType, c.Email = []string{"user:inference", "user:profile"}, "pro", user
		b, _ := json.Marshal(c)
		if err := writeAtomic(filepath.Join(e.configDir, e.d.credFile), b); err != nil {
			return err
		}
		once.Do(func() { close(done) })
		return nil
	}
	_, stop, err := serveLoopback(ctx, func(port int) *http.Server {
		s.httpPort = port
		return s.newServer(ctx, s.httpRoutes())
	})
	if err != nil {
		return err
	}
	defer stop()
	u, _ := s.generateLoginURL()["loginUrl"].(string)
	fmt.Fprintf(e.stdout, e.d.loginBanner, u)
	select {
	case <-done:
		fmt.Fprintln(e.stdout, "\nLogin successful.")
		return nil
	case <-ctx.Done():
		return nil
	}
}
