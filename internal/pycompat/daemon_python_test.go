package pycompat_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// TestPythonGatewayEnvironment is the Python gateway's operator moving
// over with their scripts. poolgate starts on that gateway's own .env (its
// names: API_KEYS, ADMIN_TOKEN, LINGMA_ACCOUNTS with a plain
// session_bundle, LINGMA_BIN pointing at the simulator, seconds for
// durations; less LINGMA_WORK_DIR, which `poolgate migrate` consumes) with
// python_compat, and the old scripts run as they parse the answers: the
// auto-login start/status loop, the admin reads, the clients' chat,
// Responses and Messages turns, error bodies. Then a login moves: exported
// here, imported into a fresh instance (which answered 401 while logged
// out), exported from there unsealed, unpacked as the Python gateway
// unpacks LINGMA_SESSION_BUNDLE into its one-instance work dir, and that
// deployment comes back through `poolgate migrate`, twice.
func TestPythonGatewayEnvironment(t *testing.T) {
	o := newOldTree(t)
	key := newBundleKey(t)
	var vars []string
	for _, v := range o.vars {
		if !strings.HasPrefix(v, "LINGMA_WORK_DIR=") {
			vars = append(vars, v)
		}
	}
	vars = append(vars, "POOLGATE_PYTHON_COMPAT=true", "POOLGATE_BUNDLE_IMPORT_PLAIN=true",
		"POOLGATE_BUNDLE_KEY="+key, "POOLGATE_LOGIN_RECIPE=simworker", "POOLGATE_HEALTH_INTERVAL=300ms")
	envFile := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(envFile, []byte(strings.Join(vars, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartDaemonArgs(t, []string{"-env-file", envFile}, "POOLGATE_SIMULATE=auto")
	for _, want := range []string{"API_KEYS (Python gateway setting) read as api_keys", "GATEWAY_QUEUE_TIMEOUT_SEC (Python gateway setting) read as queue_timeout"} {
		if !strings.Contains(d.Log(), want) {
			t.Errorf("start-up lines lack %q", want)
		}
	}

	// acct-2 starts from its plain bundle; acct-1 needs a login, which the
	// seed's bare auto-login start picks it for.
	testenv.WaitForNoError(t, 20*time.Second, "acct-2 ready from its plain bundle, acct-1 needing a login", func() error {
		var h pyHealth
		d.GetJSON(t, "/healthz", pythonAdminToken, &h)
		if h.PoolSize != 2 || h.PoolReady != 1 || len(h.Instances) != 2 || h.Instances[0].State != supervisor.StateNeedsLogin ||
			h.Instances[1].State != supervisor.StateReady || h.Simulated {
			return fmt.Errorf("healthz %+v", h)
		}
		return nil
	})
	seedLoginLoop(t, d)
	testenv.WaitForNoError(t, 20*time.Second, "both ready, acct-1 logged in by Chromium", func() error {
		var h pyHealth
		d.GetJSON(t, "/healthz", pythonAdminToken, &h)
		if !h.OK || h.PoolReady != 2 {
			return fmt.Errorf("healthz %+v", h)
		}
		return nil
	})
	// Without credentials /healthz keeps the counts, not the names.
	var anon pyHealth
	if d.GetJSON(t, "/healthz", "", &anon); anon.PoolSize != 2 || len(anon.Instances) != 0 {
		t.Errorf("anonymous healthz %+v, want counts without instances", anon)
	}

	exported := checkPythonAdminReads(t, d)
	checkPythonTurns(t, d)
	checkPythonResponses(t, d)
	checkPythonErrors(t, d)
	checkStreamedPlainImport(t, d)
	plain := moveToAFreshInstance(t, o, key, exported)
	backToThePythonGateway(t, o, plain)
}

// seedLoginLoop is the Python gateway's auto-login script, reading what it
// read: a bare start (the gateway picks the instance needing a login)
// answered 200 with ok, state running and the instance; status read until
// that instance's auth has an id; a start naming the instance, now logged
// in, answered already_logged_in without a second login.
func seedLoginLoop(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	type startAnswer struct {
		OK        bool   `json:"ok"`
		State     string `json:"state"`
		Instance  string `json:"instance"`
		AutoLogin *struct {
			State string `json:"state"`
		} `json:"auto_login"`
		Auth *struct {
			ID string `json:"id"`
		} `json:"auth"`
	}
	start := pyPost(t, d, "/internal/auto-login/start", pythonAdminToken, "")
	var st startAnswer
	if err := json.Unmarshal([]byte(start.body), &st); err != nil || start.code != http.StatusOK || !st.OK ||
		st.Instance != "acct-1" || st.State != "running" || st.AutoLogin == nil {
		t.Fatalf("auto-login start: %d %s", start.code, start.body)
	}
	testenv.WaitForNoError(t, 90*time.Second, "the script's status loop: acct-1's auth has an id", func() error {
		var status struct {
			OK        bool `json:"ok"`
			Instances []struct {
				Instance  string `json:"instance"`
				AutoLogin struct {
					State string `json:"state"`
				} `json:"auto_login"`
				Auth struct {
					ID string `json:"id"`
				} `json:"auth"`
			} `json:"instances"`
		}
		code := d.GetJSON(t, "/internal/auto-login/status", pythonAdminToken, &status)
		for _, in := range status.Instances {
			if status.OK && in.Instance == "acct-1" && in.Auth.ID == "u1" && in.AutoLogin.State == "succeeded" {
				return nil
			}
		}
		return fmt.Errorf("%d %+v", code, status)
	})
	again := pyPost(t, d, "/internal/auto-login/start?instance=acct-1", pythonAdminToken, "")
	st = startAnswer{}
	if err := json.Unmarshal([]byte(again.body), &st); err != nil || again.code != http.StatusOK || st.State != "already_logged_in" ||
		st.Auth == nil || st.Auth.ID != "u1" {
		t.Errorf("auto-login start of a logged-in instance: %d %s", again.code, again.body)
	}
}

// pyPost posts body as the Python gateway's scripts and OpenAI clients do:
// a Bearer key, JSON, no Anthropic header (which would ask for Anthropic's
// error shape).
func pyPost(t *testing.T, d *daemontest.Daemon, path, key, body string) apiCall {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, d.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return apiCall{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

type pyHealth struct {
	OK        bool `json:"ok"`
	PoolSize  int  `json:"pool_size"`
	PoolReady int  `json:"pool_ready"`
	Simulated bool `json:"simulated"`
	Instances []struct {
		Name     string           `json:"name"`
		State    supervisor.State `json:"state"`
		InFlight int              `json:"in_flight"`
	} `json:"instances"`
}

// checkPythonAdminReads: export, models/raw and stats called bare, as the
// Python gateway's scripts do. With a bundle key and no plain exports, the
// export is sealed; it is returned for the move to a fresh instance.
func checkPythonAdminReads(t *testing.T, d *daemontest.Daemon) []byte {
	t.Helper()
	exp := send(t, d, "/internal/session/export", pythonAdminToken, nil)
	var ex struct {
		Instance, Account, Bundle string
		Picked                    bool
	}
	if err := json.Unmarshal([]byte(exp.body), &ex); err != nil || exp.code != http.StatusOK || ex.Instance != "acct-1" ||
		ex.Account != "acct-1" || !ex.Picked || ex.Bundle == "" {
		t.Errorf("export: %d %.300s", exp.code, exp.body)
	}
	var raw struct {
		Instance         string            `json:"instance"`
		Picked           bool              `json:"picked"`
		Raw              json.RawMessage   `json:"raw"`
		ExtractedNameMap map[string]string `json:"extracted_name_map"`
		ExposedKeys      []string          `json:"exposed_keys"`
	}
	if code := d.GetJSON(t, "/internal/models/raw", pythonAdminToken, &raw); code != http.StatusOK || raw.Instance != "acct-1" ||
		!raw.Picked || len(raw.ExposedKeys) == 0 || raw.ExtractedNameMap[raw.ExposedKeys[0]] == "" || len(raw.Raw) < 3 {
		t.Errorf("models/raw: %d %+v", code, raw)
	}
	var eb errorBody
	if code := d.GetJSON(t, "/internal/models/raw?instance=nope", pythonAdminToken, &eb); code != http.StatusNotFound {
		t.Errorf("models/raw of an unknown instance: %d %v, want 404", code, eb.Error)
	}
	var stats struct {
		OK   bool `json:"ok"`
		Pool []struct {
			Name  string `json:"name"`
			State string `json:"state"`
		} `json:"pool"`
		Concurrency map[string]float64 `json:"concurrency"`
	}
	if code := d.GetJSON(t, "/internal/stats", pythonAdminToken, &stats); code != http.StatusOK || !stats.OK ||
		len(stats.Pool) != 2 || stats.Concurrency["max_in_flight"] != 8 {
		t.Errorf("stats: %d %+v", code, stats)
	}
	return []byte(exp.body)
}

// checkPythonTurns: a chat completion with the Python gateway's served_by
// and latency, a Responses turn, and a streamed Messages turn whose
// message_start counts the input tokens.
func checkPythonTurns(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	chat := send(t, d, "/v1/chat/completions", pythonAPIKey, chatBody("m", "hello old clients", nil))
	var cc struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		ServedBy string `json:"served_by"`
		Latency  *struct {
			FirstTokenMS *int64 `json:"first_token_ms"`
			TotalMS      *int64 `json:"total_ms"`
		} `json:"latency"`
	}
	if err := json.Unmarshal([]byte(chat.body), &cc); err != nil || chat.code != http.StatusOK || len(cc.Choices) != 1 ||
		cc.Choices[0].Message.Content != "You said: hello old clients" || cc.ServedBy == "" ||
		cc.ServedBy != chat.header.Get("X-Poolgate-Instance") || cc.Latency == nil || cc.Latency.TotalMS == nil {
		t.Errorf("chat: %d %s", chat.code, chat.body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk(d, pythonAPIKey)
	resp, err := client.Responses.New(ctx, responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello responses")}})
	if err != nil || resp.OutputText() != "You said: hello responses" || resp.Status != "completed" {
		t.Errorf("responses: %v %+v", err, resp)
	}

	msg := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 64, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "hello anthropic clients"}}}
	count := send(t, d, "/v1/messages/count_tokens", pythonAPIKey, map[string]any{"model": "m", "messages": msg["messages"]})
	var counted struct {
		InputTokens int `json:"input_tokens"`
	}
	if err := json.Unmarshal([]byte(count.body), &counted); err != nil || counted.InputTokens == 0 {
		t.Fatalf("count_tokens: %d %s", count.code, count.body)
	}
	stream := send(t, d, "/v1/messages", pythonAPIKey, msg)
	start, ok := sseEvent(stream.body, "message_start")
	var ms struct {
		Message struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
			} `json:"usage"`
		} `json:"message"`
	}
	if !ok || json.Unmarshal([]byte(start), &ms) != nil || ms.Message.Usage.InputTokens != counted.InputTokens {
		t.Errorf("message_start %s: input_tokens, want %d (count_tokens)\n%s", start, counted.InputTokens, stream.body)
	}
	if got := messagesText(stream.body); got != "You said: hello anthropic clients" {
		t.Errorf("messages stream text %q:\n%s", got, stream.body)
	}
}

// sseEvent returns the data of the first event named name in an SSE body.
func sseEvent(body, name string) (string, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if sc.Text() == "event: "+name && sc.Scan() {
			return strings.TrimPrefix(sc.Text(), "data: "), true
		}
	}
	return "", false
}

// messagesText joins the text deltas of a Messages stream.
func messagesText(body string) string {
	var out strings.Builder
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var ev struct {
			Delta struct{ Text string } `json:"delta"`
		}
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &ev) == nil {
			out.WriteString(ev.Delta.Text)
		}
	}
	return out.String()
}

// checkStreamedPlainImport: the Python gateway's export of a whole work
// dir, larger than the admin API's 4 MiB body cap and naming an instance
// of the old deployment, goes to the instance the query names.
func checkStreamedPlainImport(t *testing.T, d *daemontest.Daemon) {
	t.Helper()
	dir := t.TempDir()
	testenv.LoggedInWorkDir(t, dir, "u1")
	noise := make([]byte, 6<<20) // incompressible logs: a 6 MiB tar.gz
	_, _ = rand.Read(noise)
	if err := os.WriteFile(filepath.Join(dir, "logs", "big.log"), noise, 0o600); err != nil {
		t.Fatal(err)
	}
	b64 := testenv.PackWorkDir(t, dir)
	raw, _ := base64.StdEncoding.DecodeString(b64)
	body, _ := json.Marshal(map[string]any{"instance": "lingma-0", "account": "u1", "raw_bytes": len(raw), "bundle_b64": b64})
	if len(body) <= 4<<20 {
		t.Fatalf("the export is %d bytes: not over the admin body cap", len(body))
	}
	code, ans := post(t, d.URL+"/internal/session/import?instance=acct-1", pythonAdminToken, body)
	if code != http.StatusOK || !strings.Contains(string(ans), `"format":"plain"`) || !strings.Contains(string(ans), `"instance":"acct-1"`) {
		t.Fatalf("import of a %d-byte plain export: %d %s", len(body), code, ans)
	}
	testenv.WaitForNoError(t, 30*time.Second, "acct-1 back, on the imported credentials", func() error {
		if in, ok := poolState(t, d, pythonAdminToken).Instance("acct-1"); !ok || in.State != supervisor.StateReady || in.Restarts == 0 {
			return fmt.Errorf("acct-1 %+v", in)
		}
		return nil
	})
}
