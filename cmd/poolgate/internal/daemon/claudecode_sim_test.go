package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// A claude-code pool on the bundled simulator (simulate, no Claude Code
// binary): the demo pool serves; an account logged in through its CLI's
// own login, driven by real Chromium with the simworker recipe, serves;
// its login travels to another daemon in a session bundle.
func TestClaudeCodeSimulatedPool(t *testing.T) {
	demo := daemontest.StartDaemon(t, "POOLGATE_DRIVER=claude-code")
	waitAllReady(t, demo, 2, 20*time.Second)
	if got := sdkAsk(t, demo, "hello demo"); got != "You said: hello demo" {
		t.Fatalf("demo pool: %q", got)
	}

	key := newBundleKey(t)
	acct := `POOLGATE_ACCOUNTS=[{"name":"cc-a","username":"demo1","password":"demo1"}]`
	a := daemontest.StartDaemon(t, "POOLGATE_DRIVER=claude-code", "POOLGATE_CLAUDE_CODE_SECRET=login", acct,
		"POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm", "POOLGATE_HEALTH_INTERVAL=500ms")
	waitReady := func(d *daemontest.Daemon, within time.Duration) {
		t.Helper()
		testenv.WaitForNoError(t, within, "cc-a ready", func() error {
			var s route.Snapshot
			d.GetJSON(t, "/internal/pool", "adm", &s)
			if len(s.Instances) == 1 && s.Instances[0].State == supervisor.StateReady {
				return nil
			}
			return fmt.Errorf("instances %+v", s.Instances)
		})
	}
	waitReady(a, 90*time.Second) // logged out at start: Chromium logs it in
	testenv.WaitForNoError(t, 5*time.Second, "cc-a's login succeeded", func() error {
		var st loginStatus
		a.GetJSON(t, "/internal/auto-login/status", "adm", &st)
		if len(st.Instances) != 1 || st.Instances[0].State != "succeeded" {
			return fmt.Errorf("login status %+v", st)
		}
		return nil
	})
	if got := sdkAsk(t, a, "after the login"); got != "You said: after the login" {
		t.Fatalf("after the login: %q", got)
	}

	b := daemontest.StartDaemon(t, "POOLGATE_DRIVER=claude-code", "POOLGATE_CLAUDE_CODE_SECRET=login", acct,
		"POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm", "POOLGATE_AUTO_LOGIN=false")
	testenv.WaitForNoError(t, 20*time.Second, "cc-a logged out on b", func() error {
		var s route.Snapshot
		b.GetJSON(t, "/internal/pool", "adm", &s)
		if len(s.Instances) == 1 && s.Instances[0].State == supervisor.StateNeedsLogin {
			return nil
		}
		return fmt.Errorf("b: %+v", s.Instances)
	})
	var exported []byte
	testenv.WaitForNoError(t, 10*time.Second, "cc-a's bundle exported from a", func() error {
		code, body := post(t, a.URL+"/internal/session/export?instance=cc-a", "adm", nil)
		if code != http.StatusOK {
			return fmt.Errorf("export: %d %s", code, body)
		}
		exported = body
		return nil
	})
	var exp struct{ Bytes int }
	if err := json.Unmarshal(exported, &exp); err != nil || exp.Bytes == 0 {
		t.Fatalf("export %s (%v)", exported, err)
	}
	if code, body := post(t, b.URL+"/internal/session/import?instance=cc-a", "adm", exported); code != http.StatusOK {
		t.Fatalf("import: %d %s", code, body)
	}
	waitReady(b, 20*time.Second)
	if got := sdkAsk(t, b, "from the bundle"); got != "You said: from the bundle" {
		t.Fatalf("after the import: %q", got)
	}
}
