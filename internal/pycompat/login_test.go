package pycompat

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/access"
)

// logins stands in for the login runner and the pool as the admin API's
// adapter shows them (admin's tests' fakes): acct-1 needs a login (its
// worker says it is logged out), ready is logged in, down's worker does not
// answer; the runner lists acct-1's login succeeded and down's failed, and
// one it started runs.
type logins struct{ started []string }

func (l *logins) instance(name string) LoginInstance {
	state, login := "needs_login", map[string]string{
		"acct-1": `{"name":"acct-1","state":"succeeded","attempts":1}`,
		"down":   `{"name":"down","state":"failed","attempts":3,"last_error":"login page says: no"}`,
		"ready":  `{"name":"ready","state":"idle"}`,
	}[name]
	if name == "ready" {
		state = "ready"
	}
	return LoginInstance{Name: name, ID: "u-" + name, State: state, Ready: name == "ready", Login: json.RawMessage(login),
		Confirm: func(context.Context) (bool, error) {
			if name == "down" {
				return false, errors.New("worker connection lost")
			}
			return name == "ready", nil
		}}
}

func (l *logins) start(name string, force bool) string {
	running := false
	for _, s := range l.started {
		running = running || s == name
	}
	body, _, ok := LoginStart(context.Background(), l.instance(name), false, force, running, func() json.RawMessage {
		l.started = append(l.started, name)
		return json.RawMessage(`{"name":"` + name + `","state":"running","started_at":"2026-01-02T03:04:05Z"}`)
	})
	if !ok {
		return "no browser"
	}
	b, _ := json.Marshal(body)
	return string(b)
}

func (l *logins) status() string { return l.statusAs(access.RoleAdmin) }

// statusAs is the status answer to a caller of the role.
func (l *logins) statusAs(role access.Role) string {
	var ins []LoginInstance
	for _, n := range []string{"acct-1", "down", "ready"} {
		ins = append(ins, l.instance(n))
	}
	ctx := access.WithCaller(context.Background(), access.Caller{Role: role})
	b, _ := json.Marshal(LoginStatus(ctx, ins, true))
	return string(b)
}

// With python_compat, start and status answer as the Python gateway's
// scripts parse them: already_logged_in for a named logged-in instance
// (no login started unless forced), already_running, "ok", and per instance
// "instance", "auto_login" and "auth" asked of the worker. (The admin API
// answers them with 200, where poolgate's own start is 202.)
func TestLoginAnswers(t *testing.T) {
	l := &logins{}
	tests := []struct {
		name     string
		give     func() string
		wantBody string
	}{
		{"start a logged-in instance", func() string { return l.start("ready", false) },
			`{"ok":true,"state":"already_logged_in","instance":"ready","auth":{"logged_in":true,"id":"u-ready"}}`},
		{"start", func() string { return l.start("acct-1", false) }, `{"ok":true,"state":"running","instance":"acct-1","auto_login":{"name":"acct-1","state":"running",`},
		{"start again", func() string { return l.start("acct-1", false) }, `{"ok":true,"state":"already_running","instance":"acct-1","auto_login":`},
		{"start forced", func() string { return l.start("ready", true) }, `{"ok":true,"state":"running","instance":"ready",`},
		{"status", l.status, `{"browser":true,"instances":[{"name":"acct-1","state":"succeeded","attempts":1,`},
		{"status of a logged-out instance", l.status, `"instance":"acct-1","auto_login":{"name":"acct-1","state":"succeeded",`},
		{"status asks the worker", l.status, `"auth":{"logged_in":false},"instance_state":"needs_login"}`},
		{"status of a logged-in instance", l.status, `"instance":"ready","auto_login":{"name":"ready","state":"idle"`},
		{"status of a worker that does not answer", l.status, `"auth":{"logged_in":false,"error":"worker connection lost"`},
		{"status is ok", l.status, `"ok":true`},
		{"status names who a logged-in instance is", l.status, `"auth":{"logged_in":true,"id":"u-ready"}`},
		{"a viewer's status names nobody", func() string { return l.statusAs(access.RoleViewer) },
			`"instance":"ready","auto_login":{"name":"ready","state":"idle"},"auth":{"logged_in":true},`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if body := tt.give(); !strings.Contains(body, tt.wantBody) {
				t.Errorf("got %s, want it containing %s", body, tt.wantBody)
			}
		})
	}
	if got := strings.Join(l.started, ","); got != "acct-1,acct-1,ready" {
		t.Errorf("got starts %q, want acct-1 twice and the forced ready", got)
	}
}
