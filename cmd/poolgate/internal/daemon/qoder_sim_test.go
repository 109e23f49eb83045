package daemon

import (
	"context"
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

// A qoder pool on the bundled simulator (simulate, no qodercli): the demo
// pool's accounts run the CLI's device login, which real Chromium passes
// with the simworker recipe on the simulated device page, and then serve;
// an account's login travels to another daemon in a session bundle (its
// config/.auth, machine id included) and serves there without a login.
func TestQoderSimulatedPool(t *testing.T) {
	start := time.Now()
	key := newBundleKey(t)
	a := daemontest.StartDaemon(t, "POOLGATE_DRIVER=qoder", "POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm",
		"POOLGATE_HEALTH_INTERVAL=500ms")
	waitQoderStates(t, a, 90*time.Second, "the demo accounts logged in by Chromium and ready", supervisor.StateReady)
	t.Logf("demo pool ready after %s", time.Since(start).Round(time.Millisecond))
	if got := sdkAsk(t, a, "hello demo"); got != "You said: hello demo" {
		t.Fatalf("demo pool: %q", got)
	}

	b := daemontest.StartDaemon(t, "POOLGATE_DRIVER=qoder", "POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm",
		"POOLGATE_AUTO_LOGIN=false")
	waitQoderStates(t, b, 20*time.Second, "b's accounts logged out", supervisor.StateNeedsLogin)
	code, exported := post(t, a.URL+"/internal/session/export?instance=sim-1", "adm", nil)
	var exp struct{ Bytes int }
	if code != http.StatusOK || json.Unmarshal(exported, &exp) != nil || exp.Bytes == 0 {
		t.Fatalf("export: %d %s", code, exported)
	}
	if code, body := post(t, b.URL+"/internal/session/import?instance=sim-1", "adm", exported); code != http.StatusOK {
		t.Fatalf("import: %d %s", code, body)
	}
	testenv.WaitForNoError(t, 30*time.Second, "sim-1 ready on b", func() error {
		var s route.Snapshot
		b.GetJSON(t, "/internal/pool", "adm", &s)
		for _, in := range s.Instances {
			if in.Name == "sim-1" && in.State == supervisor.StateReady {
				return nil
			}
		}
		return fmt.Errorf("b: %+v", s.Instances)
	})
	if got := sdkAsk(t, b, "from the bundle"); got != "You said: from the bundle" {
		t.Fatalf("after the import: %q", got)
	}
}

// waitQoderStates waits until every instance of d is in state.
func waitQoderStates(t *testing.T, d *daemontest.Daemon, within time.Duration, what string, state supervisor.State) {
	t.Helper()
	testenv.WaitForNoError(t, within, what, func() error {
		var s route.Snapshot
		d.GetJSON(t, "/internal/pool", "adm", &s)
		for _, in := range s.Instances {
			if in.State != state {
				return fmt.Errorf("instances %+v", s.Instances)
			}
		}
		return nil
	})
}

// sdkAsk sends prompt to d through the OpenAI SDK and returns the answer.
func sdkAsk(t *testing.T, d *daemontest.Daemon, prompt string) string {
	t.Helper()
	c := sdk(d, "x")
	resp, err := c.Chat.Completions.New(context.Background(), chatParams(prompt))
	if err != nil {
		t.Fatalf("%s: %v", prompt, err)
	}
	return resp.Choices[0].Message.Content
}
