package pycompat_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// checkPythonResponses: the Python gateway's Responses answers, with
// python_compat: output_text in the body; a stream whose last events are
// response.completed and data: [DONE]; a chat-style tool and an object
// tool output taken.
func checkPythonResponses(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	one := pyPost(t, d, "/v1/responses", pythonAPIKey, `{"model":"m","input":"hello old scripts"}`)
	var body struct {
		Status     string `json:"status"`
		OutputText string `json:"output_text"`
	}
	if err := json.Unmarshal([]byte(one.body), &body); err != nil || one.code != http.StatusOK || body.OutputText != "You said: hello old scripts" {
		t.Errorf("responses body: %d %s", one.code, one.body)
	}
	stream := pyPost(t, d, "/v1/responses", pythonAPIKey, `{"model":"m","input":"hello stream","stream":true}`)
	frames := strings.Split(strings.TrimSpace(stream.body), "\n\n")
	if n := len(frames); stream.code != http.StatusOK || n < 2 || frames[n-1] != "data: [DONE]" ||
		!strings.HasPrefix(frames[n-2], "event: response.completed\n") || !strings.Contains(frames[n-2], `"output_text":"You said: hello stream"`) {
		t.Errorf("responses stream does not end with response.completed and data: [DONE]:\n%s", stream.body)
	}
	tools := `{"model":"m","input":[{"role":"user","content":"weather?"},` +
		`{"type":"function_call","call_id":"c1","name":"get_weather","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":{"temp":21}}],` +
		`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}}]}`
	withTools := pyPost(t, d, "/v1/responses", pythonAPIKey, tools)
	if err := json.Unmarshal([]byte(withTools.body), &body); err != nil || withTools.code != http.StatusOK || body.Status != "completed" {
		t.Errorf("responses with a chat-style tool and an object output: %d %s", withTools.code, withTools.body)
	}
}

// pyError is an error body read as the Python gateway's scripts read it.
type pyError struct {
	Detail struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"detail"`
}

// checkPythonErrors: errors carry the Python gateway's detail, on the API
// and on the admin API.
func checkPythonErrors(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	var e pyError
	if code := d.GetJSON(t, "/internal/models/raw?instance=nope", pythonAdminToken, &e); code != http.StatusNotFound ||
		e.Detail.Error.Code != "unknown_instance" || !strings.Contains(e.Detail.Error.Message, "unknown instance nope") {
		t.Errorf("models/raw of an unknown instance: %d %+v, want 404 with detail", code, e)
	}
	bad := pyPost(t, d, "/v1/chat/completions", "sk-wrong", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	e = pyError{}
	if err := json.Unmarshal([]byte(bad.body), &e); err != nil || bad.code != http.StatusUnauthorized || e.Detail.Error.Message == "" {
		t.Errorf("a wrong key: %d %s, want 401 with detail", bad.code, bad.body)
	}
}

// moveToAFreshInstance starts a fresh poolgate whose only account, acct-1,
// is logged out: a turn is the Python gateway's 401 there (not_logged_in,
// in the OpenAI and the Anthropic shape) and /metrics refuses the API key
// naming the metrics token. It imports the export of the first poolgate
// unchanged, serves, and exports the login again unsealed (plain exports
// allowed), for the Python gateway; it returns that bundle_b64.
func moveToAFreshInstance(t *testing.T, o oldTree, key string, exported []byte) string {
	t.Helper()
	d := daemontest.StartDaemon(t, "POOLGATE_WORKER_BIN="+o.lingmaBin, `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw1"}]`,
		"POOLGATE_API_KEYS="+pythonAPIKey, "POOLGATE_ADMIN_TOKEN="+pythonAdminToken, "POOLGATE_BUNDLE_KEY="+key,
		"POOLGATE_AUTO_LOGIN=false", "POOLGATE_PYTHON_COMPAT=true", "POOLGATE_BUNDLE_EXPORT_PLAIN=true", "POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_SIMULATE=auto")
	testenv.WaitForNoError(t, 20*time.Second, "the fresh acct-1 needing a login", func() error {
		if in, ok := poolState(t, d, pythonAdminToken).Instance("acct-1"); !ok || in.State != supervisor.StateNeedsLogin {
			return fmt.Errorf("acct-1 %+v", in)
		}
		return nil
	})
	chat := pyPost(t, d, "/v1/chat/completions", pythonAPIKey, `{"model":"m","messages":[{"role":"user","content":"anyone?"}]}`)
	var e pyError
	if err := json.Unmarshal([]byte(chat.body), &e); err != nil || chat.code != http.StatusUnauthorized || e.Detail.Error.Code != "not_logged_in" {
		t.Errorf("chat on a logged-out pool: %d %s, want 401 not_logged_in with detail", chat.code, chat.body)
	}
	msg := send(t, d, "/v1/messages", pythonAPIKey, map[string]any{"model": "m", "max_tokens": 16,
		"messages": []map[string]any{{"role": "user", "content": "anyone?"}}})
	if msg.code != http.StatusUnauthorized || !strings.Contains(msg.body, `"type":"authentication_error"`) {
		t.Errorf("messages on a logged-out pool: %d %s, want 401 authentication_error", msg.code, msg.body)
	}
	var denied pyError
	if code := d.GetJSON(t, "/metrics", pythonAPIKey, &denied); code != http.StatusForbidden ||
		!strings.Contains(denied.Detail.Error.Message, "POOLGATE_METRICS_TOKEN") {
		t.Errorf("/metrics with an API key: %d %+v, want 403 naming the metrics token", code, denied)
	}

	if code, ans := post(t, d.URL+"/internal/session/import?instance=acct-1", pythonAdminToken, exported); code != http.StatusOK ||
		!strings.Contains(string(ans), `"format":"sealed"`) {
		t.Fatalf("import of the first poolgate's export: %d %s", code, ans)
	}
	testenv.WaitForNoError(t, 30*time.Second, "acct-1 ready on the imported login", func() error {
		if in, ok := poolState(t, d, pythonAdminToken).Instance("acct-1"); !ok || in.State != supervisor.StateReady {
			return fmt.Errorf("acct-1 %+v", in)
		}
		return nil
	})
	if c := pyPost(t, d, "/v1/chat/completions", pythonAPIKey, `{"model":"m","messages":[{"role":"user","content":"moved"}]}`); c.code != http.StatusOK ||
		!strings.Contains(c.body, `"served_by":"acct-1"`) {
		t.Errorf("chat after the import: %d %s", c.code, c.body)
	}

	back := pyPost(t, d, "/internal/session/export", pythonAdminToken, "")
	var plain struct {
		Instance  string `json:"instance"`
		Account   string `json:"account"`
		RawBytes  int    `json:"raw_bytes"`
		BundleB64 string `json:"bundle_b64"`
	}
	if json.Unmarshal([]byte(back.body), &plain) != nil || back.code != http.StatusOK || plain.Instance != "acct-1" || plain.Account != "u1" {
		t.Fatalf("plain export: %d %.300s", back.code, back.body)
	}
	if raw, err := base64.StdEncoding.DecodeString(plain.BundleB64); err != nil || len(raw) != plain.RawBytes {
		t.Fatalf("plain export's bundle_b64: %v, %d bytes, raw_bytes %d", err, len(raw), plain.RawBytes)
	}
	return plain.BundleB64
}

// backToThePythonGateway unpacks a plain export as the Python gateway did
// with LINGMA_SESSION_BUNDLE: into its work dir, here the one instance of a
// deployment without LINGMA_ACCOUNTS. `poolgate migrate` makes that
// instance account lingma-0 and copies its work dir; a second run says it
// did; poolgate started on the result serves lingma-0 with no login, and
// the scripts' ?instance=lingma-0 names it.
func backToThePythonGateway(t *testing.T, o oldTree, bundleB64 string) {
	t.Helper()
	root := t.TempDir()
	work := filepath.Join(root, "lingma-work")
	unpackAsThePythonGateway(t, bundleB64, work)
	envFile := filepath.Join(root, ".env")
	env := strings.Join([]string{"API_KEYS=" + pythonAPIKey, "ADMIN_TOKEN=" + pythonAdminToken, "LINGMA_BIN=" + o.lingmaBin,
		"LINGMA_WORK_DIR=" + work, "AUTO_LOGIN_ENABLED=false"}, "\n")
	if err := os.WriteFile(envFile, []byte(env+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, cfgPath := filepath.Join(root, "data"), filepath.Join(root, "poolgate.yaml")
	_, report := runMigrate(t, "-env-file", envFile, "-data-dir", data, "-o", cfgPath)
	for _, want := range []string{"it is account lingma-0 here", "lingma-0: copied " + work + " to " + filepath.Join(data, "workers", "lingma-0"),
		"wrote " + cfgPath} {
		if !strings.Contains(report, want) {
			t.Errorf("migrate's report lacks %q:\n%s", want, report)
		}
	}
	_, report = runMigrate(t, "-env-file", envFile, "-data-dir", data, "-o", cfgPath)
	for _, want := range []string{"lingma-0: already copied from " + work + " by the run of ", cfgPath + " holds this configuration already"} {
		if !strings.Contains(report, want) {
			t.Errorf("the second migrate's report lacks %q:\n%s", want, report)
		}
	}

	d := daemontest.StartDaemonArgs(t, []string{"-config", cfgPath}, "POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_SIMULATE=auto",
		"POOLGATE_DATA_DIR="+data) // the config names it too; testenv would add a temp dir of its own
	testenv.WaitForNoError(t, 30*time.Second, "lingma-0 ready on the Python gateway's work dir", func() error {
		if in, ok := poolState(t, d, pythonAdminToken).Instance("lingma-0"); !ok || in.State != supervisor.StateReady {
			return fmt.Errorf("lingma-0 %+v", in)
		}
		return nil
	})
	if c := pyPost(t, d, "/v1/chat/completions", pythonAPIKey, `{"model":"m","messages":[{"role":"user","content":"back"}]}`); c.code != http.StatusOK ||
		!strings.Contains(c.body, `"served_by":"lingma-0"`) {
		t.Errorf("chat on the migrated one-instance deployment: %d %s", c.code, c.body)
	}
	var raw struct {
		Instance string `json:"instance"`
	}
	if code := d.GetJSON(t, "/internal/models/raw?instance=lingma-0", pythonAdminToken, &raw); code != http.StatusOK || raw.Instance != "lingma-0" {
		t.Errorf("models/raw?instance=lingma-0: %d %+v", code, raw)
	}
}

// unpackAsThePythonGateway extracts a plain bundle into dir the way the
// Python gateway did: every entry of the tar.gz, by its path relative to
// the work dir.
func unpackAsThePythonGateway(t *testing.T, b64, dir string) {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			err = os.MkdirAll(p, 0o700)
		} else {
			data, rerr := io.ReadAll(tr)
			err = errors.Join(rerr, os.MkdirAll(filepath.Dir(p), 0o700), os.WriteFile(p, data, os.FileMode(h.Mode)&0o777))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
