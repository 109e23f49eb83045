package qoder_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/qoder"
	"github.com/poolgate/poolgate/pool/qoder/qodertest"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/session/bundle"
)

// The real qodercli (the pinned release, from `make agents`) under the real
// supervisor, offline: logged in with a stored login made the way the CLI
// makes one (qodertest.StoreLogin), it starts ready, answers the driver's
// control requests, and fails a turn the way it fails without the
// vendor's servers. Every line it printed is checked against the driver's
// model (startPool's cleanup). The login states, the device URL and a
// refused token are exercised through the daemon
// (cmd/poolgate/internal/daemon/qoder_test.go).

// startReal runs the accounts on the real qodercli.
func startReal(t *testing.T, accounts ...supervisor.WorkerConfig) *pool {
	t.Helper()
	bin := qodertest.Bin(t)
	log := &testenv.Buffer{}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	drv := qoder.New(qoder.DefaultSettings(), agentcli.Config{Command: []string{bin},
		StartTimeout: 60 * time.Second, StopTimeout: 5 * time.Second, Logger: logger})
	launcher := &supervisor.ExecLauncher{Env: []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8",
		"HTTPS_PROXY=" + qodertest.RefusedProxy, "HTTP_PROXY=" + qodertest.RefusedProxy}}
	sup := supervisor.New(supervisor.Config{}, supervisortest.Drive(drv, accounts), launcher, nil, logger)
	sup.Start(context.Background())
	p := &pool{sup: sup, drv: drv, log: log}
	t.Cleanup(func() {
		sup.Shutdown()
		launcher.Close()
		st := drv.Stats()
		if n := st.Unknown.Load() + st.Unparsed.Load(); n != 0 || st.Lines.Load() == 0 {
			t.Errorf("of %d lines qodercli printed, %d were unknown and %d unparsed", st.Lines.Load(),
				st.Unknown.Load(), st.Unparsed.Load())
		}
		if t.Failed() {
			t.Logf("log:\n%s", log.String())
		}
	})
	return p
}

func TestRealLoggedIn(t *testing.T) {
	start := time.Now()
	a := account(t, "q1", "", false)
	a.StartTimeout, a.HealthInterval, a.HealthTimeout = 60*time.Second, time.Second, 10*time.Second
	qodertest.StoreLogin(t, filepath.Join(a.WorkDir, "config"), "real@example.com")
	p := startReal(t, a)
	var st supervisor.Status
	testenv.WaitFor(t, 90*time.Second, "the real qodercli ready", func() bool {
		st = p.status("q1")
		return st.State == supervisor.StateReady
	})
	t.Logf("ready after %s", time.Since(start).Round(time.Millisecond))
	ms, err := st.Backend.Models(context.Background())
	if err != nil || len(ms) == 0 {
		t.Errorf("models %v (%v), want at least qodercli's auto", ms, err)
	}

	// Offline the vendor is out of reach: the turn fails as an upstream
	// error in the CLI's words, and the account stays in rotation.
	secret := filepath.Join(a.WorkDir, "config", ".auth", "machine_id")
	r := run(t, st.Backend, ask("summarize @"+secret+" and @config/.auth/user", ""))
	if ue, ok := errors.AsType[*chat.UpstreamError](r.err); !ok || !strings.Contains(ue.Message, "could not be completed") {
		t.Errorf("offline turn: %v, want an upstream error with the CLI's text", r.err)
	}
	if got := p.status("q1"); got.State != supervisor.StateReady || got.Restarts != 0 {
		t.Errorf("after the failed turn: %s, %d restarts; want ready", got.State, got.Restarts)
	}
	// The escaped mentions were read as text: the CLI's session transcript
	// holds no file it attached.
	if files := attachments(t, filepath.Join(a.WorkDir, "config")); len(files) > 0 {
		t.Errorf("qodercli attached %v to the turn", files)
	}
	t.Logf("done after %s", time.Since(start).Round(time.Millisecond))
}

// attachments lists the files qodercli attached to any turn of the
// sessions under configDir (its session transcripts' attachment lines).
func attachments(t *testing.T, configDir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(configDir, "projects", "*", "*.jsonl"))
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			var e struct {
				Type       string `json:"type"`
				Attachment struct {
					Type, Filename string
				} `json:"attachment"`
			}
			if json.Unmarshal([]byte(l), &e) == nil && e.Type == "attachment" && e.Attachment.Filename != "" {
				out = append(out, e.Attachment.Type+" "+e.Attachment.Filename)
			}
		}
	}
	return out
}

// The control of the test above: the same mention sent to the real CLI
// without the driver's escaping is read into the turn.
func TestRealMentionUnescaped(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "config")
	qodertest.StoreLogin(t, config, "real@example.com")
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not for the model"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, qodertest.Bin(t), "--print", "--input-format", "stream-json", "--output-format",
		"stream-json", "--tools", "", "--permission-mode", "dont_ask", "--max-model-request-retries", "0")
	cmd.Env, cmd.Dir = qodertest.Env(dir, config), dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	in := `{"type":"user","message":{"role":"user","content":"summarize @notes.txt"},"parent_tool_use_id":null}` + "\n"
	if _, err := stdin.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	// The turn is over at its result (it fails: the vendor is out of reach).
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() && !strings.Contains(sc.Text(), `"type":"result"`) {
	}
	if files := attachments(t, config); len(files) != 1 || !strings.HasSuffix(files[0], "notes.txt") {
		t.Errorf("attached %v, want notes.txt: the control does not show the CLI reading a mention", files)
	}
}

// A bundle of a logged-in work dir, installed on another machine (another
// work dir, home and config path), is a login there: qodercli's key comes
// from .auth/machine_id, which the bundle carries. Without that file the
// stored login is no login, and a bundle lacking it is refused.
func TestRealBundleOnAnotherMachine(t *testing.T) {
	spec := bundle.Spec(qoder.Kind.Credentials)
	key := make([]byte, bundle.KeySize)
	here := t.TempDir()
	qodertest.StoreLogin(t, filepath.Join(here, "config"), "moved@example.com")
	sealed, m, err := bundle.Pack(here, spec, "q1", key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if m.MachineID == "" {
		t.Errorf("manifest %+v names no machine id", m)
	}
	b, err := bundle.Open(sealed, key, spec, bundle.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	there := filepath.Join(t.TempDir(), "elsewhere", "work")
	if err := b.Install(there); err != nil {
		t.Fatal(err)
	}
	st := qodertest.Status(t, there, filepath.Join(there, "config"))
	if st["logged_in"] != true || st["email"] != "moved@example.com" {
		t.Errorf("qodercli status on the other machine: %v, want logged in as moved@example.com", st)
	}
	// Another machine id under the same stored login: not a login.
	idFile := filepath.Join(there, "config", ".auth", "machine_id")
	if err := os.WriteFile(idFile, []byte("00000000-1111-4222-8333-444444444444"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := qodertest.Status(t, there, filepath.Join(there, "config")); st["logged_in"] != false {
		t.Errorf("qodercli status with another machine id: %v, want logged out", st)
	}
	// A bundle without the machine id does not open.
	_ = os.Remove(filepath.Join(here, "config", ".auth", "machine_id"))
	if _, _, err := bundle.Pack(here, spec, "q1", key, time.Now()); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("Pack without machine_id: %v, want ErrNoCredentials", err)
	}
}
