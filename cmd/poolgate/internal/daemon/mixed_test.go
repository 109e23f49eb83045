package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// A pool of several kinds in one daemon: the helpers of the mixed-pool
// tests (mixed_*_test.go). A test lists its accounts (mixedAccount), each
// of its own kind, binary and models; startMixed writes them into a config
// file and starts the real binary on it. An account of a kind that needs a
// real program (an agent CLI) names it in Bin, and the pool then runs
// without the simulate switch: the simulated Lingma accounts beside it name
// simworkerBin as theirs.

// mixedAccount is one account of a test pool of several kinds.
type mixedAccount struct {
	Name   string
	Driver string   // "" = the top-level driver (lingma)
	Models []string // the simulator's model keys (--model-keys); none: its defaults
	Args   []string // more worker arguments of this account
	// Bin and BinArgs are the account's worker binary and the driver's
	// arguments after it ("" = the bundled simulator).
	Bin     string
	BinArgs []string
	Env     map[string]string
}

// mixedKinds is the test pool: two simulated Lingma accounts and two
// simulated model servers (simworker --protocol=openai), each kind with
// models of its own.
func mixedKinds() []mixedAccount {
	return []mixedAccount{
		{Name: "lm-1", Models: []string{"lm-coder", "lm-chat"}},
		{Name: "lm-2", Models: []string{"lm-coder", "lm-chat"}},
		{Name: "ms-1", Driver: "openai", Models: []string{"ms-large", "ms-small"}},
		{Name: "ms-2", Driver: "openai", Models: []string{"ms-large", "ms-small"}},
	}
}

// kindOfModel is the kind each of mixedKinds' models belongs to.
var kindOfModel = map[string]string{"lm-coder": "lingma", "lm-chat": "lingma", "ms-large": "openai", "ms-small": "openai"}

// mixedYAML renders a configuration file: the accounts, then extra (more
// YAML, verbatim). Every simulated Lingma account starts logged in (it has
// no username).
func mixedYAML(t *testing.T, accounts []mixedAccount, extra string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("health_interval: 200ms\naccounts:\n")
	for _, a := range accounts {
		acct := map[string]any{"name": a.Name}
		if a.Driver != "" {
			acct["driver"] = a.Driver
		}
		args := a.Args
		if len(a.Models) > 0 {
			args = append([]string{"--model-keys=" + strings.Join(a.Models, ",")}, args...)
		}
		if len(args) > 0 {
			acct["args"] = args
		}
		if a.Bin != "" {
			acct["worker_bin"], acct["worker_args"] = a.Bin, a.BinArgs
		}
		if len(a.Env) > 0 {
			acct["env"] = a.Env
		}
		line, err := json.Marshal(acct) // JSON is YAML
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  - %s\n", line)
	}
	b.WriteString(extra)
	return b.String()
}

// writeMixed writes mixedYAML to path.
func writeMixed(t *testing.T, path string, accounts []mixedAccount, extra string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(mixedYAML(t, accounts, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startMixed starts a daemon on a config file of accounts plus extra,
// with env on top, and waits until every account is ready. It returns the
// daemon and the file, for a reload to rewrite. The pool is simulated
// unless an account names a binary of its own.
func startMixed(t *testing.T, accounts []mixedAccount, extra string, env ...string) (*daemontest.Daemon, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "poolgate.yaml")
	writeMixed(t, path, accounts, extra)
	for _, a := range accounts {
		if a.Bin != "" {
			env = append(env, "POOLGATE_SIMULATE=auto")
			break
		}
	}
	d := daemontest.StartDaemonArgs(t, []string{"-config", path}, env...)
	waitAllReady(t, d, len(accounts), 30*time.Second)
	return d, path
}

// simworkerBin is a worker binary that runs the bundled simulator, for a
// simulated account in a pool whose other accounts run real programs
// (the simulate switch serves a pool whole or not at all), obeying the
// test prompts' directives.
func simworkerBin(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "simworker")
	script := fmt.Sprintf("#!/bin/sh\nexec %q simworker \"$@\" --directives\n", testenv.PoolgateBin(t))
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// instancesOf returns the pool's instances by name.
func instancesOf(t *testing.T, d *daemontest.Daemon) map[string]route.InstanceStatus {
	t.Helper()
	out := map[string]route.InstanceStatus{}
	for _, in := range poolState(t, d, "").Instances {
		out[in.Name] = in
	}
	return out
}

// mixedPost posts body to path and returns the status, the instance that
// served it, the request id and the body.
func mixedPost(t *testing.T, d *daemontest.Daemon, path string, header map[string]string, body string) (int, string, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Poolgate-Instance"), resp.Header.Get("X-Request-Id"), string(b)
}

// convBody is a chat completion request of model for the messages, given
// as alternating user and assistant texts.
func convBody(model string, texts ...string) string {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	for i, s := range texts {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, s})
	}
	b, _ := json.Marshal(map[string]any{"model": model, "messages": msgs})
	return string(b)
}

// chatAnswer is the text of a chat completion's answer.
func chatAnswer(t *testing.T, body string) string {
	t.Helper()
	var r struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Choices) == 0 {
		t.Fatalf("not a chat completion (%v): %s", err, body)
	}
	return r.Choices[0].Message.Content
}

// turnLine returns the daemon's turn log line of the request id, waiting
// briefly for it (the line is written as the answer ends).
func turnLine(t *testing.T, d *daemontest.Daemon, requestID string) string {
	t.Helper()
	var line string
	testenv.WaitFor(t, 5*time.Second, "the turn line of "+requestID, func() bool {
		for l := range strings.Lines(d.Log()) {
			if strings.Contains(l, "msg=turn") && strings.Contains(l, "request_id="+requestID) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// turnAttr is an attribute's value in a turn line ("" when absent).
func turnAttr(line, key string) string {
	m := regexp.MustCompile(`(?:^| )` + regexp.QuoteMeta(key) + `=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1]
}

// readyOfKind counts the ready instances of a kind.
func readyOfKind(t *testing.T, d *daemontest.Daemon, kind string) int {
	t.Helper()
	n := 0
	for _, in := range instancesOf(t, d) {
		if in.Driver == kind && in.State == supervisor.StateReady {
			n++
		}
	}
	return n
}

// adminPost posts an admin action without a body and returns its status.
func adminPost(t *testing.T, d *daemontest.Daemon, path string) int {
	t.Helper()
	code, _ := post(t, d.URL+path, "", nil)
	return code
}

// killWorker kills the named instance's worker process (SIGKILL): a crash.
func killWorker(t *testing.T, d *daemontest.Daemon, name string) {
	t.Helper()
	pid := instancesOf(t, d)[name].PID
	if pid <= 0 {
		t.Fatalf("%s has no process to kill", name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (%d): %v", name, pid, err)
	}
}
