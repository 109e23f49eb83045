package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/browsertest"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/qoder"
	"github.com/poolgate/poolgate/pool/qoder/qodertest"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Qoder CLI as the worker: a pool of real `qodercli` processes (the pinned
// release, from `make agents`), offline. The vendor is out of reach, so
// the workers go as far as their login: one without a login waits in
// needs_login and hands out the device URL its `qodercli login` prints,
// which the rod login opens (Chromium maps qoder.com to a simulated device
// page on loopback); one with a personal access token fails its start
// with the CLI's reason. Every line the real binary printed is recorded
// and read back through the driver's model of the protocol.

const qoderAdmin = "adm-qoder"

// qoderAccountEnv keeps a worker's requests on loopback: the vendor's
// hosts are reached through a proxy that refuses them.
func qoderAccountEnv(t *testing.T) map[string]string {
	p := qodertest.RefusingProxy(t)
	return map[string]string{"HTTPS_PROXY": p, "HTTP_PROXY": p, "NO_PROXY": "127.0.0.1,localhost"}
}

// startQoderPool starts a daemon of qodercli workers for accounts on
// dataDir.
func startQoderPool(t *testing.T, dataDir string, accounts []map[string]any, env ...string) *daemontest.Daemon {
	t.Helper()
	bin := qodertest.Bin(t)
	b, err := json.Marshal(accounts)
	if err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartDaemon(t, append([]string{"POOLGATE_DRIVER=qoder", "POOLGATE_WORKER_BIN=" + bin,
		"POOLGATE_ACCOUNTS=" + string(b), "POOLGATE_DATA_DIR=" + dataDir, "POOLGATE_API_KEYS=sk-1",
		"POOLGATE_ADMIN_TOKEN=" + qoderAdmin, "POOLGATE_HEALTH_INTERVAL=500ms",
		"POOLGATE_HEALTH_TIMEOUT=3s", "POOLGATE_START_TIMEOUT=60s"}, env...)...)
	return d
}

// checkQoderTranscripts reads every line the workers printed back through
// the driver's model of the protocol: an unknown or unparsed one fails
// the test.
func checkQoderTranscripts(t *testing.T, dataDir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "workers", "*", "transcripts", "*.jsonl"))
	lines, types := 0, map[string]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			var tl agentcli.TranscriptLine
			if err := json.Unmarshal(sc.Bytes(), &tl); err != nil {
				t.Errorf("%s: not a transcript line: %v", f, err)
				continue
			}
			if tl.Dir != "out" {
				continue
			}
			lines++
			m, err := agentcli.Parse([]byte(tl.Line), qoder.Vocabulary())
			if err != nil {
				t.Errorf("qodercli printed a line outside the driver's model: %v\n%s", err, tl.Line)
				continue
			}
			types[m.Type+"/"+m.Subtype]++
		}
		fh.Close()
	}
	if lines == 0 && !t.Failed() {
		t.Error("no line of qodercli was recorded")
	}
	t.Logf("%d lines from qodercli in %d transcripts, all in the model: %v", lines, len(files), types)
}

// qoderInstances are the daemon's instances by name.
func qoderInstances(t *testing.T, d *daemontest.Daemon) map[string]instanceView {
	t.Helper()
	out := map[string]instanceView{}
	for _, in := range poolState(t, d, qoderAdmin).Instances {
		out[in.Name] = instanceView{state: in.State, pid: in.PID, restarts: in.Restarts, lastErr: in.LastError}
	}
	return out
}

// deviceURLRE is the URL `qodercli login` prints.
var deviceURLRE = regexp.MustCompile(`^https://qoder\.com/device/selectAccounts\?challenge=[^&]+&challenge_method=S256&nonce=[^&]+&machine_id=[^&]+&client_id=[^&]+$`)

// Without a login the account runs the CLI's device login and waits in
// needs_login, with that process and no restarts, as the CLI's own status
// command says; the URL it printed is the instance's login URL. A personal access
// token the CLI cannot exchange fails the start with its reason, and the
// worker is failed after FailAfter starts, not restarted forever.
func TestQoderWorkersWithoutLogin(t *testing.T) {
	start := time.Now()
	env := qoderAccountEnv(t)
	dataDir := t.TempDir()
	// q-refused has a stored login under another machine id: the CLI
	// cannot read it, and says it is not logged in.
	config := filepath.Join(dataDir, "workers", "q-refused", "config")
	qodertest.StoreLogin(t, config, "refused@example.com")
	if err := os.WriteFile(filepath.Join(config, ".auth", "machine_id"), []byte("00000000-1111-4222-8333-444444444444"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startQoderPool(t, dataDir, []map[string]any{
		// Its args are the session's: `qodercli login` refuses them
		// ("error: unknown option '--model'").
		{"name": "q-out", "env": env, "args": []string{"--model", "auto"}},
		{"name": "q-refused", "env": env},
		{"name": "q-pat", "password": "qoder_not_a_real_token", "env": env},
	}, "POOLGATE_AUTO_LOGIN=false", "POOLGATE_QODER_RECORD=true")
	t.Cleanup(func() { checkQoderTranscripts(t, dataDir) })
	var first instanceView
	testenv.WaitFor(t, 120*time.Second, "q-out in needs_login", func() bool {
		first = qoderInstances(t, d)["q-out"]
		return first.state == supervisor.StateNeedsLogin
	})
	t.Logf("q-out needs a login after %s", time.Since(start).Round(time.Millisecond))

	testenv.WaitFor(t, 90*time.Second, "q-pat's start refused with the CLI's reason", func() bool {
		return strings.Contains(qoderInstances(t, d)["q-pat"].lastErr, "could not log in with the account's personal access token: ")
	})
	t.Logf("q-pat refused after %s: %s", time.Since(start).Round(time.Millisecond), qoderInstances(t, d)["q-pat"].lastErr)

	testenv.WaitFor(t, 120*time.Second, "q-refused running its device login", func() bool {
		in := qoderInstances(t, d)["q-refused"]
		return in.state == supervisor.StateNeedsLogin && in.restarts == 1
	})
	t.Logf("q-refused needs a login after %s", time.Since(start).Round(time.Millisecond))

	checkLoggedOut(t, d, filepath.Join(dataDir, "workers", "q-out"))
	testenv.WaitFor(t, 180*time.Second, "q-pat failed", func() bool {
		return qoderInstances(t, d)["q-pat"].state == supervisor.StateFailed
	})
	pat := qoderInstances(t, d)["q-pat"]
	if !strings.Contains(pat.lastErr, "could not log in with the account's personal access token") || pat.restarts != 4 {
		t.Errorf("q-pat: %q after %d restarts, want the CLI's reason after FailAfter (5) starts", pat.lastErr, pat.restarts)
	}
	t.Logf("q-pat failed after %s", time.Since(start).Round(time.Millisecond))
	if strings.Contains(d.Log(), "qoder_not_a_real_token") {
		t.Error("the token is in the daemon's log")
	}
	// All this while (health checks every 500ms), q-out kept its process.
	if in := qoderInstances(t, d)["q-out"]; in.state != supervisor.StateNeedsLogin || in.restarts != 0 || in.pid != first.pid {
		t.Errorf("q-out: %s, %d restarts, pid %d (was %d); want needs_login on its first process", in.state, in.restarts,
			in.pid, first.pid)
	}
	if in := qoderInstances(t, d)["q-refused"]; in.state != supervisor.StateNeedsLogin || in.restarts != 1 {
		t.Errorf("q-refused: %s, %d restarts; want needs_login after the one restart into the device login", in.state, in.restarts)
	}
}

// checkLoggedOut checks a logged-out account's login URL is the CLI's
// device URL, that the CLI's own status says it is logged out, and that no
// worker's error reaches a caller.
func checkLoggedOut(t *testing.T, d *daemontest.Daemon, work string) {
	t.Helper()
	var u struct {
		URL string `json:"url"`
	}
	if code := d.GetJSON(t, "/internal/auto-login/url?instance=q-out", qoderAdmin, &u); code != http.StatusOK ||
		!deviceURLRE.MatchString(u.URL) {
		t.Errorf("login URL: %d %q, want the device URL qodercli login prints", code, u.URL)
	}
	if st := qodertest.Status(t, work, filepath.Join(work, "config")); st["logged_in"] != false {
		t.Errorf("qodercli status says %v, want logged out as the pool says", st)
	}
	c := send(t, d, "/v1/chat/completions", "sk-1", chatBody("auto", "hello", nil))
	if c.code == http.StatusOK || c.code == http.StatusBadGateway {
		t.Errorf("a turn with no account able to serve: %d %s, want no worker's error", c.code, c.body)
	}
}

// With automatic login on, the rod login opens the device URL the real CLI
// printed, and the login recipe signs in and approves it on the device
// page. The page is the simulator's, served over TLS on loopback; the
// browser is Chromium with qoder.com mapped to it, so the URL is the CLI's
// own, and the recipe the kind's (qoder-device, whose hosts are
// qoder.com's). The CLI then polls the vendor for the approval, which
// never comes offline.
func TestQoderDeviceLogin(t *testing.T) {
	start := time.Now()
	page := &sim.DevicePage{Accounts: map[string]string{"dev@example.com": "dev-password"}}
	srv := httptest.NewUnstartedServer(page)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := srv.Listener.Addr().(interface{ String() string }).String()
	chromium := mappedChromium(t, "qoder.com", port)
	dataDir := t.TempDir()
	d := startQoderPool(t, dataDir, []map[string]any{
		{"name": "q-dev", "username": "dev@example.com", "password": "dev-password", "env": qoderAccountEnv(t)},
	}, "POOLGATE_AUTO_LOGIN=true", "POOLGATE_CHROMIUM="+chromium, "POOLGATE_LOGIN_ATTEMPTS=1")
	testenv.WaitFor(t, 180*time.Second, "the device page approved by the login recipe", func() bool {
		return len(page.Approvals()) > 0
	})
	t.Logf("approved after %s", time.Since(start).Round(time.Millisecond))
	a := page.Approvals()[0]
	id, err := os.ReadFile(filepath.Join(dataDir, "workers", "q-dev", "config", ".auth", "machine_id"))
	if err != nil {
		t.Fatal(err)
	}
	visits := page.Visits()
	q, _ := url.ParseQuery(visits[len(visits)-1])
	if a.User != "dev@example.com" || a.MachineID != strings.TrimSpace(string(id)) || a.Challenge != q.Get("challenge") {
		t.Errorf("approval %+v (page opened with %s), want dev@example.com approving the worker's login (machine %s)",
			a, visits, id)
	}
	if in := qoderInstances(t, d)["q-dev"]; in.state != supervisor.StateNeedsLogin || in.restarts != 0 {
		t.Errorf("q-dev: %s after %d restarts, want needs_login (the approval cannot reach the CLI offline)", in.state, in.restarts)
	}
}

// mappedChromium is a Chromium that resolves host to addr (host:port on
// loopback) and takes its certificate: a wrapper script, the daemon's
// chromium setting.
func mappedChromium(t *testing.T, host, addr string) string {
	t.Helper()
	bin := browsertest.Chromium(t)
	script := filepath.Join(t.TempDir(), "chromium")
	body := fmt.Sprintf("#!/bin/sh\nexec %q --host-resolver-rules=%q --ignore-certificate-errors \"$@\"\n", bin,
		"MAP "+host+" "+addr)
	if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return script
}
