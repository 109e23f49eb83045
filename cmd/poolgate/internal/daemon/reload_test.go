package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Live reload through the real daemon and its simulated workers: the
// config file is rewritten, then POST /internal/reload or SIGHUP.

// reloadConfig is a config file's reloadable part plus a few other keys.
type reloadConfig struct {
	keys     map[string]string // name -> secret; the key named alpha has role admin
	accounts []string          // names; each logs in as u-<name>
	password string            // every account's ("pw" when empty)
	extra    string            // more YAML, verbatim
}

func (c reloadConfig) write(t *testing.T, path string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("worker_args: [--logged-in]\nhealth_interval: 200ms\n")
	b.WriteString("api_keys:\n")
	names := make([]string, 0, len(c.keys))
	for name := range c.keys {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		role := "user"
		if name == "alpha" {
			role = "admin" // the operator's key: it reads the pool and reloads
		}
		fmt.Fprintf(&b, "  - {name: %s, key: %s, role: %s}\n", name, c.keys[name], role)
	}
	pw := c.password
	if pw == "" {
		pw = "pw"
	}
	b.WriteString("accounts:\n")
	for _, name := range c.accounts {
		fmt.Fprintf(&b, "  - {name: %s, username: u-%s, password: %s}\n", name, name, pw)
	}
	b.WriteString(c.extra)
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startWithConfig writes c and starts a daemon reading it.
func startWithConfig(t *testing.T, c reloadConfig) (*daemontest.Daemon, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "poolgate.yaml")
	c.write(t, path)
	d := daemontest.StartDaemonArgs(t, []string{"-config", path})
	readyWith(t, d, "sk-alpha", len(c.accounts))
	return d, path
}

// readyWith waits until n instances are ready, reading the pool with token.
func readyWith(t *testing.T, d *daemontest.Daemon, token string, n int) []route.InstanceStatus {
	t.Helper()
	var ready []route.InstanceStatus
	testenv.WaitForNoError(t, 20*time.Second, fmt.Sprintf("%d ready instances", n), func() error {
		snap := poolState(t, d, token)
		ready = ready[:0]
		for _, in := range snap.Instances {
			if in.State == supervisor.StateReady && in.PID > 0 {
				ready = append(ready, in)
			}
		}
		if len(ready) == n && len(snap.Instances) == n {
			return nil
		}
		return fmt.Errorf("instances %+v", snap.Instances)
	})
	return ready
}

// reload posts /internal/reload with the admin credential and decodes the
// answer: a report on 200, else the admin error.
func reload(t *testing.T, d *daemontest.Daemon, token string) (int, admin.ReloadReport, admin.ErrorBody) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/internal/reload", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST /internal/reload: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var rep admin.ReloadReport
	var eb admin.ErrorBody
	if resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(body, &rep)
	} else {
		err = json.Unmarshal(body, &eb)
	}
	if err != nil {
		t.Fatalf("reload answer %d %s: %v", resp.StatusCode, body, err)
	}
	return resp.StatusCode, rep, eb
}

// chatOnce sends one short chat turn with key; it returns the status and
// the instance that served it.
func chatOnce(client *http.Client, d *daemontest.Daemon, key, prompt string) (int, string, error) {
	b, _ := json.Marshal(chatBody("m", prompt, nil))
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, "", err
	}
	return resp.StatusCode, resp.Header.Get("X-Poolgate-Instance"), nil
}

// outcome is one request of the load.
type outcome struct {
	key        string
	start, end time.Time
	code       int
	instance   string
	err        error
}

// TestHotReloadUnderLoad: 40 clients send turns without pause while a
// reload adds an account, revokes the key beta and adds the key gamma. No
// request fails but beta's, and each of those that starts after the reload
// answered is a 401; a beta request that ended before the reload was sent
// succeeded. The new account serves, and gamma works from the reload on.
func TestHotReloadUnderLoad(t *testing.T) {
	cfg := reloadConfig{keys: map[string]string{"alpha": "sk-alpha", "beta": "sk-beta"}, accounts: []string{"acct-1", "acct-2"},
		extra: "max_queue: 1000\ninstance_max_in_flight: 4\n"}
	d, path := startWithConfig(t, cfg)

	const clients = 40
	var (
		mu       sync.Mutex
		outcomes []outcome
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		reloaded = make(chan struct{}) // closed when the reload has answered
	)
	client := &http.Client{Timeout: 60 * time.Second}
	for i := range clients {
		wg.Go(func() {
			keys := []string{"alpha", "beta"}[i%2 : i%2+1]
			if i%4 == 3 {
				keys = []string{"beta", "gamma"} // beta until the reload, then the new key
			}
			secrets := map[string]string{"alpha": "sk-alpha", "beta": "sk-beta", "gamma": "sk-gamma"}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[0]
				select {
				case <-reloaded:
					key = keys[len(keys)-1]
				default:
				}
				o := outcome{key: key, start: time.Now()}
				o.code, o.instance, o.err = chatOnce(client, d, secrets[key], fmt.Sprintf("[[sim:delay=100ms]] client %d turn %d", i, n))
				o.end = time.Now()
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		})
	}
	count := func(pred func(o outcome) bool) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if pred(o) {
				n++
			}
		}
		return n
	}
	testenv.WaitFor(t, 20*time.Second, "beta and alpha turns served before the reload", func() bool {
		return count(func(o outcome) bool { return o.code == 200 && o.key == "beta" }) >= clients &&
			count(func(o outcome) bool { return o.code == 200 && o.key == "alpha" }) >= clients
	})

	next := cfg
	next.keys = map[string]string{"alpha": "sk-alpha", "gamma": "sk-gamma"}
	next.accounts = []string{"acct-1", "acct-2", "acct-3"}
	next.write(t, path)
	sent := time.Now()
	code, rep, eb := reload(t, d, "sk-alpha")
	answered := time.Now()
	close(reloaded)
	if code != http.StatusOK {
		t.Fatalf("reload: %d %+v", code, eb)
	}
	want := admin.Applied{
		Accounts: admin.Diff{Added: []string{"acct-3"}, Removed: []string{}, Changed: []string{}},
		APIKeys:  admin.Diff{Added: []string{"gamma"}, Removed: []string{"beta"}, Changed: []string{}},
	}
	if fmt.Sprint(rep.Applied) != fmt.Sprint(want) || len(rep.RestartRequired) != 0 {
		t.Errorf("reload report %+v, want applied %+v and nothing to restart", rep, want)
	}

	testenv.WaitFor(t, 30*time.Second, "acct-3 serving, and alpha and gamma served after the reload", func() bool {
		served := func(key string) int {
			return count(func(o outcome) bool { return o.key == key && o.code == 200 && o.start.After(answered) })
		}
		return count(func(o outcome) bool { return o.instance == "acct-3" && o.code == 200 }) > 0 &&
			served("alpha") >= clients && served("gamma") >= clients/4
	})
	close(stop)
	wg.Wait()

	byKey := map[string]map[int]int{}
	for _, o := range outcomes {
		if byKey[o.key] == nil {
			byKey[o.key] = map[int]int{}
		}
		byKey[o.key][o.code]++
		switch {
		case o.err != nil:
			t.Errorf("%s request failed without an answer: %v", o.key, o.err)
		case o.key != "beta" && o.code != http.StatusOK:
			t.Errorf("%s request answered %d, want 200", o.key, o.code)
		case o.key == "beta" && o.start.After(answered) && o.code != http.StatusUnauthorized:
			t.Errorf("beta request started after the reload answered %d, want 401", o.code)
		case o.key == "beta" && o.end.Before(sent) && o.code != http.StatusOK:
			t.Errorf("beta request before the reload answered %d, want 200", o.code)
		case o.key == "beta" && o.code != http.StatusOK && o.code != http.StatusUnauthorized:
			t.Errorf("beta request during the reload answered %d, want 200 or 401", o.code)
		}
	}
	if byKey["beta"][http.StatusUnauthorized] == 0 || byKey["gamma"][http.StatusOK] == 0 {
		t.Errorf("the load did not cover the revoked and the new key: %v", byKey)
	}
	spanning := count(func(o outcome) bool { return o.start.Before(sent) && o.end.After(answered) })
	if spanning == 0 {
		t.Error("no request was in flight across the reload")
	}
	t.Logf("%d requests, %d of them in flight across the reload (which took %s); by key and status: %v",
		len(outcomes), spanning, answered.Sub(sent).Round(time.Millisecond), byKey)
	readyWith(t, d, "sk-alpha", 3)
}

// TestSIGHUPDrainsARemovedAccount: SIGHUP re-reads the file. A removed
// account takes no new turn and drains: its turn in flight finishes (200),
// then its worker is stopped and it leaves the pool. A new value of a
// restart-only setting is left alone and named in the log.
func TestSIGHUPDrainsARemovedAccount(t *testing.T) {
	cfg := reloadConfig{keys: map[string]string{"alpha": "sk-alpha"}, accounts: []string{"acct-1", "acct-2"}}
	d, path := startWithConfig(t, cfg)
	gone := poolState(t, d, "sk-alpha")
	victim, ok := gone.Instance("acct-2")
	if !ok {
		t.Fatalf("no acct-2 in %+v", gone.Instances)
	}

	// One long turn on each instance (each takes one at a time).
	type result struct {
		code     int
		instance string
		err      error
	}
	results := make(chan result, 2)
	client := &http.Client{Timeout: 60 * time.Second}
	for i := range 2 {
		go func() {
			code, in, err := chatOnce(client, d, "sk-alpha", fmt.Sprintf("[[sim:delay=4s]] long turn %d", i))
			results <- result{code, in, err}
		}()
	}
	testenv.WaitFor(t, 10*time.Second, "both instances busy", func() bool {
		return poolState(t, d, "sk-alpha").InFlight == 2
	})

	next := cfg
	next.accounts = []string{"acct-1"}
	next.extra = "max_queue: 7\n"
	next.write(t, path)
	if err := syscall.Kill(d.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 3*time.Second, "acct-2 draining with its turn in flight", func() bool {
		in, ok := poolState(t, d, "sk-alpha").Instance("acct-2")
		return ok && in.State == supervisor.StateDraining && in.InFlight == 1
	})
	for range 2 {
		r := <-results
		if r.err != nil || r.code != http.StatusOK {
			t.Errorf("turn in flight on %s: %d %v, want 200", r.instance, r.code, r.err)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "acct-2 gone from the pool", func() bool {
		_, ok := poolState(t, d, "sk-alpha").Instance("acct-2")
		return !ok
	})
	if err := syscall.Kill(-victim.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("acct-2's worker group %d survived its removal: %v", victim.PID, err)
	}
	testenv.WaitFor(t, 5*time.Second, "the reload logged", func() bool {
		return strings.Contains(d.Log(), "configuration reloaded") && strings.Contains(d.Log(), "restart_required=max_queue")
	})
	for i := range 3 {
		if code, in, err := chatOnce(client, d, "sk-alpha", fmt.Sprintf("after %d", i)); err != nil || code != 200 || in != "acct-1" {
			t.Errorf("turn after the reload: %d on %q (%v), want 200 on acct-1", code, in, err)
		}
	}
}

// TestReloadRefusesABadConfigWhole: a config that does not validate is
// refused with 422 config_invalid and nothing of it applies (its new key is
// refused, its new account absent, the old key works). A valid one then
// restarts the changed account on its new settings and reports a
// restart-only setting it left alone.
func TestReloadRefusesABadConfigWhole(t *testing.T) {
	cfg := reloadConfig{keys: map[string]string{"alpha": "sk-alpha"}, accounts: []string{"acct-1", "acct-2"}}
	d, path := startWithConfig(t, cfg)
	before := poolState(t, d, "sk-alpha")

	bad := cfg
	bad.keys = map[string]string{"alpha": "sk-alpha", "gamma": "sk-gamma"}
	bad.accounts = []string{"acct-1", "acct-2", "acct-3", "acct-3"}
	bad.write(t, path)
	code, _, eb := reload(t, d, "sk-alpha")
	if code != http.StatusUnprocessableEntity || eb.Error.Code != admin.CodeConfigInvalid ||
		!strings.Contains(eb.Error.Message, `account name "acct-3" is used twice`) {
		t.Errorf("bad config: %d %+v, want 422 config_invalid naming the problem", code, eb)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	if code, _, _ := chatOnce(client, d, "sk-gamma", "hi"); code != http.StatusUnauthorized {
		t.Errorf("the refused config's new key answered %d, want 401", code)
	}
	if code, _, _ := chatOnce(client, d, "sk-alpha", "hi"); code != http.StatusOK {
		t.Errorf("the key in force answered %d, want 200", code)
	}
	if n := len(poolState(t, d, "sk-alpha").Instances); n != 2 {
		t.Errorf("%d instances after a refused reload, want 2", n)
	}

	good := cfg
	good.password = "rotated"
	good.accounts = []string{"acct-1", "acct-2"}
	good.extra = "retries: 5\n"
	good.write(t, path)
	code, rep, eb := reload(t, d, "sk-alpha")
	if code != http.StatusOK {
		t.Fatalf("good config: %d %+v", code, eb)
	}
	wantChanged := []string{"acct-1", "acct-2"}
	if !slices.Equal(rep.Applied.Accounts.Changed, wantChanged) || !slices.Equal(rep.RestartRequired, []string{"retries"}) {
		t.Errorf("report %+v, want accounts changed %v and restart_required [retries]", rep, wantChanged)
	}
	after := readyWith(t, d, "sk-alpha", 2)
	for _, in := range after {
		old, _ := before.Instance(in.Name)
		if in.PID == old.PID {
			t.Errorf("%s kept its worker %d: a changed account restarts on its new settings", in.Name, in.PID)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", in.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(env), "SIMWORKER_ACCOUNTS=u-"+in.Name+":rotated") {
			t.Errorf("%s's new worker does not run with the new password", in.Name)
		}
	}
}
