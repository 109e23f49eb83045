package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

type loginStatus struct {
	Instances []struct {
		Name     string `json:"name"`
		State    string `json:"state"`
		Attempts int    `json:"attempts"`
	} `json:"instances"`
}

// processesUnder lists live processes whose command line mentions dir.
func processesUnder(dir string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), dir) {
			out = append(out, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

func TestAutoLoginThenServeAndReloginAfterLogout(t *testing.T) {
	dataDir := t.TempDir()
	accts, _ := json.Marshal([]map[string]string{
		{"name": "acct-1", "username": "alice", "password": "pw-a"},
		{"name": "acct-2", "username": "bob", "password": "pw-b"}})
	d := daemontest.StartDaemon(t, "POOLGATE_DATA_DIR="+dataDir, "POOLGATE_ACCOUNTS="+string(accts),
		"POOLGATE_HEALTH_INTERVAL=300ms")
	// Both start logged out: the pool logs them in with Chromium.
	waitAllReady(t, d, 2, 90*time.Second)
	var st loginStatus
	succeeded := func() int {
		d.GetJSON(t, "/internal/auto-login/status", "", &st)
		n := 0
		for _, in := range st.Instances {
			if in.State == "succeeded" {
				n++
			}
		}
		return n
	}
	for start := time.Now(); succeeded() != 2; time.Sleep(100 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("login status %+v, want both succeeded", st)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	client := sdk(d, "x")
	resp, err := client.Chat.Completions.New(ctx, chatParams("bye [[sim:logout]]"))
	if err != nil || !strings.HasPrefix(resp.Choices[0].Message.Content, "You said: bye") {
		t.Fatalf("logout turn: %v", err)
	}
	// The instance that served it is logged out now; requests keep working
	// (retried on the other one) while it logs in again.
	for i := range 6 {
		if _, err := client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("still there %d", i))); err != nil {
			t.Fatalf("request %d during the re-login: %v", i, err)
		}
	}
	testenv.WaitForNoError(t, 90*time.Second, "a re-login after the logout", func() error {
		d.GetJSON(t, "/internal/auto-login/status", "", &st)
		relogged := false
		for _, in := range st.Instances {
			relogged = relogged || (in.State == "succeeded" && in.Attempts >= 1 && scrape(t, d, `poolgate_login_attempts_total{result="success"}`) >= 3)
		}
		if relogged && len(readyInstances(t, d)) == 2 {
			return nil
		}
		return fmt.Errorf("logins %+v, pool %+v", st, poolState(t, d, "").Instances)
	})
	for _, in := range poolState(t, d, "").Instances {
		if in.State != supervisor.StateReady {
			t.Errorf("%s is %s", in.Name, in.State)
		}
	}

	d.Stop(t, 20*time.Second)
	if left := processesUnder(filepath.Join(dataDir, "login-profiles")); len(left) > 0 {
		t.Errorf("browser processes left behind: %v", left)
	}
}
