package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// The operator's settings and endpoints, each through a real daemon and its
// simulated workers.

// apiCall is one answered request.
type apiCall struct {
	code   int
	header http.Header
	body   string
}

// send posts body (JSON) to d's path with the API key and reads the whole
// answer, a stream too.
func send(t *testing.T, d *daemontest.Daemon, path, key string, body any) apiCall {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, d.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Api-Key", key)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return apiCall{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

// chatBody is a chat completions request for one user message.
func chatBody(model, prompt string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": prompt}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// content is the answer text of a non-streaming chat completion.
func content(t *testing.T, c apiCall) string {
	t.Helper()
	var r struct {
		Choices []struct {
			Message struct {
				Content   string `json:"content"`
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if c.code != http.StatusOK || json.Unmarshal([]byte(c.body), &r) != nil || len(r.Choices) == 0 {
		t.Fatalf("chat answer %d %s", c.code, c.body)
	}
	m := r.Choices[0].Message
	if len(m.ToolCalls) > 0 {
		tc := m.ToolCalls[0]
		return "call " + tc.ID + " " + tc.Function.Name + " " + tc.Function.Arguments
	}
	return m.Content
}

func tool(name string) map[string]any {
	return map[string]any{"type": "function", "function": map[string]any{"name": name,
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}
}

// TestLongAgentTurn: a turn of five simulated minutes (150 deltas two
// seconds apart, played at 1/100 speed) runs to its end, the stream kept
// alive while the answer is slow to start; a worker that goes silent is cut
// by the idle gap, not by a cap on the whole turn. The timeouts are scaled
// like the simulator's clock: idle 1.2 s stands for 2 min, turn 18 s for
// 30 min, keep-alive 150 ms for 15 s.
func TestLongAgentTurn(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_WORKER_ARGS=--time-scale=0.01",
		"POOLGATE_LINGMA_IDLE_TIMEOUT=1200ms", "POOLGATE_LINGMA_TURN_TIMEOUT=18s", "POOLGATE_STREAM_KEEPALIVE=150ms")
	d.WaitReady(t, 15*time.Second)

	start := time.Now()
	long := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m",
		"write the whole file [[sim:words=150]] [[sim:chunks=150]] [[sim:chunk-delay=2s]]", map[string]any{"stream": true}))
	took := time.Since(start)
	var text strings.Builder
	finish := ""
	for _, line := range strings.Split(long.body, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason *string                  `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &chunk) == nil && len(chunk.Choices) > 0 {
			text.WriteString(chunk.Choices[0].Delta.Content)
			if f := chunk.Choices[0].FinishReason; f != nil {
				finish = *f
			}
		}
	}
	if long.code != http.StatusOK || finish != "stop" || len(strings.Fields(text.String())) != 150 {
		t.Fatalf("long turn: %d finish %q, %d words; body tail %q", long.code, finish,
			len(strings.Fields(text.String())), tail(long.body, 300))
	}
	if took < 2500*time.Millisecond {
		t.Errorf("the long turn took %s: the simulator did not play its pacing", took)
	}

	// An answer that takes 100 simulated seconds to start: the Anthropic
	// stream opens and pings meanwhile.
	slow := send(t, d, "/v1/messages", "sk-1", map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": true,
		"messages": []map[string]any{{"role": "user", "content": "think first [[sim:delay=100s]]"}}})
	first := strings.Index(slow.body, "event: content_block_delta")
	var said strings.Builder
	for _, m := range textDeltaRE.FindAllStringSubmatch(slow.body, -1) {
		said.WriteString(m[1])
	}
	if slow.code != http.StatusOK || first < 0 || strings.Count(slow.body[:first], "event: ping") < 3 ||
		said.String() != "You said: think first" {
		t.Errorf("slow start: %d, pings before the first delta: %d\n%s", slow.code,
			strings.Count(slow.body[:max(first, 0)], "event: ping"), tail(slow.body, 600))
	}

	// A worker that goes silent mid-turn is cut at the idle gap (each of the
	// three attempts), well before the turn timeout.
	start = time.Now()
	hang := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:hang]]", nil))
	if took := time.Since(start); hang.code != http.StatusGatewayTimeout || took > 10*time.Second {
		t.Errorf("silent worker: %d after %s: %s", hang.code, took, hang.body)
	}
	// The log line may land just after the answer reached the client.
	testenv.WaitForNoError(t, 5*time.Second, "the log to name the idle gap", func() error {
		if !strings.Contains(d.Log(), "no message for 1.2s") {
			return fmt.Errorf("not in the log:\n%s", tail(d.Log(), 2000))
		}
		return nil
	})

	// The whole-turn cap is a setting of its own: at 1.5 s the same long
	// turn, never silent, is cut mid-stream.
	capped := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_WORKER_ARGS=--time-scale=0.01",
		"POOLGATE_LINGMA_TURN_TIMEOUT=1500ms")
	capped.WaitReady(t, 15*time.Second)
	cut := send(t, capped, "/v1/chat/completions", "sk-1", chatBody("m",
		"write the whole file [[sim:words=150]] [[sim:chunks=150]] [[sim:chunk-delay=2s]]", map[string]any{"stream": true}))
	if cut.code != http.StatusOK || !strings.Contains(cut.body, `"error"`) || strings.Contains(cut.body, `"finish_reason":"stop"`) {
		t.Errorf("turn over the cap: %d %s", cut.code, tail(cut.body, 400))
	}
}

var textDeltaRE = regexp.MustCompile(`"text_delta","text":"([^"]*)"`)

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// askRE reads the simulator's answer to [[sim:ask]].
var askRE = regexp.MustCompile(`^mode=(\S+) session_type=(\S+) model=(\S*) tools=(\S+) endpoint=(\S*) context=(\S+)$`)

func askOf(t *testing.T, text string) []string {
	t.Helper()
	m := askRE.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("not an ask answer: %q", text)
	}
	return m[1:]
}

// TestAskModeToolPolicyAndWhoServed: the ask mode follows the request
// (tools, tool history, agent model names) and the default; with tool_mode
// auto and a worker that speaks tool/invoke, tools go natively; the
// allowlist withholds other tools and refuses a forced one in each
// protocol's shape; every answer names its instance in X-Poolgate-Instance
// and the log has one line per turn.
func TestAskModeToolPolicyAndWhoServed(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_METRICS_PUBLIC=true",
		"POOLGATE_WORKER_ARGS=--native-tools", "POOLGATE_LINGMA_TOOL_MODE=auto",
		"POOLGATE_TOOL_ALLOWLIST=get_weather,read_file", "POOLGATE_LOG_FORMAT=json")
	d.WaitReady(t, 15*time.Second)

	plain := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:ask]]", nil))
	if got := askOf(t, content(t, plain)); got[0] != "normal" || got[1] != "chat" || got[3] != "none" || got[5] != "null" {
		t.Errorf("plain request asked %v, want normal mode without tools or a repeated prompt", got)
	}
	served := plain.header.Get("X-Poolgate-Instance")
	if served != "sim-1" && served != "sim-2" {
		t.Errorf("X-Poolgate-Instance = %q, want the serving instance", served)
	}
	agent := send(t, d, "/v1/chat/completions", "sk-1", chatBody("lingma-agent", "[[sim:ask]]", nil))
	if got := askOf(t, content(t, agent)); got[0] != "agent" || got[1] != "assistant" || got[2] == "" {
		t.Errorf("model lingma-agent asked %v, want agent mode with the default model key", got)
	}
	withTools := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:ask]]", map[string]any{
		"tools": []any{tool("get_weather"), tool("delete_everything")}}))
	if got := askOf(t, content(t, withTools)); got[0] != "agent" || got[3] != "native:1" {
		t.Errorf("request with tools asked %v, want agent mode with get_weather alone, natively", got)
	}
	call := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "Paris", map[string]any{"tools": []any{tool("get_weather")}}))
	if got := content(t, call); !strings.HasPrefix(got, "call call_sim_1_0 get_weather ") {
		t.Errorf("native call = %q, want the worker's tool/invoke call", got)
	}

	// A forced tool the allowlist takes away is the caller's error.
	forced := map[string]any{"type": "function", "function": map[string]any{"name": "delete_everything"}}
	refusals := []struct {
		path string
		body any
	}{
		{"/v1/chat/completions", chatBody("m", "go", map[string]any{"tools": []any{tool("delete_everything")}, "tool_choice": forced})},
		{"/v1/responses", map[string]any{"model": "m", "input": "go", "tool_choice": map[string]any{"type": "function", "name": "delete_everything"},
			"tools": []any{map[string]any{"type": "function", "name": "delete_everything", "parameters": map[string]any{"type": "object"}}}}},
		{"/v1/messages", map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "go"}},
			"tool_choice": map[string]any{"type": "tool", "name": "delete_everything"},
			"tools":       []any{map[string]any{"name": "delete_everything", "input_schema": map[string]any{"type": "object"}}}}},
	}
	for _, r := range refusals {
		got := send(t, d, r.path, "sk-1", r.body)
		var e struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(got.body), &e); err != nil || got.code != http.StatusBadRequest ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, `"delete_everything" is not allowed`) {
			t.Errorf("%s forcing a tool off the allowlist: %d %s", r.path, got.code, got.body)
		}
		if strings.HasPrefix(r.path, "/v1/messages") && e.Type != "error" {
			t.Errorf("Anthropic error without its envelope: %s", got.body)
		}
	}
	if n := scrape(t, d, `poolgate_tools_withheld_total{reason="allowlist"}`); n < 1 {
		t.Errorf("withheld tools counted %v, want at least 1", n)
	}

	// One line per turn, naming who served it.
	var turns int
	for _, line := range strings.Split(d.Log(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "turn" {
			continue
		}
		turns++
		for _, k := range []string{"instance", "account", "model", "reused", "latency_ms", "outcome"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("turn log line without %s: %s", k, line)
			}
		}
	}
	if turns != 4 {
		t.Errorf("%d turn log lines, want 4 (one per answered turn)", turns)
	}
}

// TestAskDefaultAndToolForwardingOff: agent mode by default for plain
// requests; with forwarding off the workers are offered no tools.
func TestAskDefaultAndToolForwardingOff(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_METRICS_PUBLIC=true",
		"POOLGATE_LINGMA_ASK_MODE=agent", "POOLGATE_TOOL_FORWARDING=false")
	d.WaitReady(t, 15*time.Second)
	plain := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:ask]]", nil))
	if got := askOf(t, content(t, plain)); got[0] != "agent" || got[1] != "assistant" {
		t.Errorf("plain request asked %v, want the default agent mode", got)
	}
	withTools := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "Paris", map[string]any{"tools": []any{tool("get_weather")}}))
	if got := content(t, withTools); got != "You said: Paris" {
		t.Errorf("answer with forwarding off = %q, want text", got)
	}
	if n := scrape(t, d, `poolgate_tools_withheld_total{reason="forwarding_off"}`); n != 1 {
		t.Errorf("withheld tools counted %v, want 1", n)
	}
}

// TestSessionReuseSettings: the cache's size and TTL bound which
// conversations continue their upstream session, and reuse can be off.
func TestSessionReuseSettings(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_SESSION_CACHE_SIZE=1", "POOLGATE_SESSION_CACHE_TTL=2s")
	d.WaitReady(t, 15*time.Second)
	say := func(c *[]map[string]any, text string) whoami {
		t.Helper()
		*c = append(*c, map[string]any{"role": "user", "content": "[[sim:whoami]] " + text})
		got := content(t, send(t, d, "/v1/chat/completions", "sk-1", map[string]any{"model": "m", "messages": *c}))
		*c = append(*c, map[string]any{"role": "assistant", "content": got})
		return parseWhoami(t, got)
	}
	var a, b, c []map[string]any
	say(&a, "a1")
	if w := say(&a, "a2"); !w.reply || w.turn != 2 {
		t.Errorf("a's follow-up %+v, want its session continued", w)
	}
	say(&b, "b1") // the one cache entry is b's now
	if w := say(&a, "a3"); w.reply {
		t.Errorf("a's follow-up after b %+v, want a new session (cache size 1)", w)
	}
	say(&c, "c1")
	time.Sleep(2500 * time.Millisecond)
	if w := say(&c, "c2"); w.reply {
		t.Errorf("c's follow-up after the TTL %+v, want a new session", w)
	}

	off := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_SESSION_REUSE=false")
	off.WaitReady(t, 15*time.Second)
	d = off
	var e []map[string]any
	say(&e, "e1")
	if w := say(&e, "e2"); w.reply || w.sections < 3 {
		t.Errorf("follow-up with reuse off %+v, want a new session given the whole transcript", w)
	}
}

// TestCooldownClearAndProbe: a ten-minute rate limit cools both accounts
// down; the operator clears one and probes the other back with a real turn.
func TestCooldownClearAndProbe(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_ADMIN_TOKEN=adm")
	d.WaitReady(t, 15*time.Second)
	limited := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "[[sim:ratelimit=10m]]", nil))
	if limited.code != http.StatusTooManyRequests {
		t.Fatalf("rate-limited request: %d %s", limited.code, limited.body)
	}
	for _, in := range poolState(t, d, "adm").Instances {
		if in.CooldownUntil == nil || time.Until(*in.CooldownUntil) < 9*time.Minute {
			t.Fatalf("%s cooldown %v, want about ten minutes", in.Name, in.CooldownUntil)
		}
	}
	if got := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "anyone?", nil)); got.code != http.StatusServiceUnavailable &&
		got.code != http.StatusTooManyRequests {
		t.Errorf("request while both cool down: %d", got.code)
	}

	code, body := post(t, d.URL+"/internal/pool/sim-1/cooldown/clear", "adm", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"had_cooldown":true`) {
		t.Errorf("clear: %d %s", code, body)
	}
	code, body = post(t, d.URL+"/internal/pool/sim-2/probe", "adm", nil)
	var probe route.ProbeResult
	if err := json.Unmarshal(body, &probe); code != http.StatusOK || err != nil || !probe.OK || probe.CooldownUntil != nil {
		t.Errorf("probe: %d %s", code, body)
	}
	for _, in := range poolState(t, d, "adm").Instances {
		if in.CooldownUntil != nil || in.State != supervisor.StateReady {
			t.Errorf("%s after clear and probe: %+v", in.Name, in)
		}
	}
	if code, _ := post(t, d.URL+"/internal/pool/nope/probe", "adm", nil); code != http.StatusNotFound {
		t.Errorf("probe of an unknown instance: %d", code)
	}
	if code, _ := post(t, d.URL+"/internal/pool/sim-1/probe", "sk-1", nil); code != http.StatusForbidden {
		t.Errorf("probe with a user key: %d, want 403", code)
	}
	for i := range 2 {
		if got := send(t, d, "/v1/chat/completions", "sk-1", chatBody("m", "back", nil)); got.code != http.StatusOK {
			t.Errorf("request %d after the cooldowns: %d %s", i, got.code, got.body)
		}
	}
}

// TestLoginStatusAndRawModels: every instance is listed (idle before any
// login) and the raw model payload comes with the parsed list.
func TestLoginStatusAndRawModels(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm")
	d.WaitReady(t, 15*time.Second)
	var st loginStatus
	d.GetJSON(t, "/internal/auto-login/status", "adm", &st)
	if len(st.Instances) != 2 || st.Instances[0].Name != "sim-1" || st.Instances[0].State != "idle" || st.Instances[1].State != "idle" {
		t.Errorf("login status %+v, want both instances idle", st)
	}
	var raw struct {
		Models []chat.Model                `json:"models"`
		Raw    map[string][]map[string]any `json:"raw"`
	}
	if code := d.GetJSON(t, "/internal/models/raw?instance=sim-2", "adm", &raw); code != http.StatusOK ||
		len(raw.Models) == 0 || len(raw.Raw["chat"]) != len(raw.Models) || raw.Raw["chat"][0]["displayName"] == nil {
		t.Errorf("models/raw: %d %+v", code, raw)
	}
}

// TestDedicatedDomainLogin: an enterprise account's worker hands out a
// login URL only at its dedicated domain. Without the setting the login
// cannot start; with it the endpoint is switched first and the account
// logs in (real Chromium).
func TestDedicatedDomainLogin(t *testing.T) {
	const corp = "https://lingma.corp.example"
	accts := `POOLGATE_ACCOUNTS=[{"name":"corp-1","username":"alice","password":"pw-a"}]`
	plain := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", accts, "POOLGATE_AUTO_LOGIN=false",
		"POOLGATE_WORKER_ARGS=--require-endpoint="+corp)
	waitState(t, plain, "corp-1", supervisor.StateNeedsLogin, 15*time.Second)
	var eb errorBody
	if code := plain.GetJSON(t, "/internal/auto-login/url?instance=corp-1", "adm", &eb); code != http.StatusBadGateway ||
		!strings.Contains(string(eb.Error["message"]), "dedicated domain") {
		t.Errorf("login URL without the domain: %d %s", code, eb.Error["message"])
	}

	d := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", accts, "POOLGATE_HEALTH_INTERVAL=300ms",
		"POOLGATE_WORKER_ARGS=--require-endpoint="+corp, "POOLGATE_LINGMA_DEDICATED_DOMAIN="+corp)
	waitState(t, d, "corp-1", supervisor.StateReady, 90*time.Second)
}

func waitState(t *testing.T, d *daemontest.Daemon, name string, want supervisor.State, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, name+" "+string(want), func() bool {
		in, _ := poolState(t, d, "adm").Instance(name)
		return in.State == want
	})
}

// TestLoginSettings: the attempts and per-attempt timeout of a login whose
// page never answers (a recipe step would wait 30 s for it; the attempt is
// cut at 2 s), and headless off reaching the browser (no display here, so
// it cannot start).
func TestLoginSettings(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() { // accept and hold every connection, never answering
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	accts := `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"alice","password":"pw-a"}]`
	d := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", accts, "POOLGATE_HEALTH_INTERVAL=300ms",
		"POOLGATE_WORKER_ARGS=--login-url=http://"+silent.Addr().String()+"/login", "POOLGATE_LOGIN_ATTEMPTS=2",
		"POOLGATE_LOGIN_TIMEOUT=2s")
	var st struct {
		Instances []struct {
			State     string `json:"state"`
			Attempts  int    `json:"attempts"`
			LastError string `json:"last_error"`
		} `json:"instances"`
	}
	// Two 2 s attempts and the 5 s backoff between them; with the 30 s step
	// timeout instead, this would take over a minute.
	testenv.WaitFor(t, 30*time.Second, "the login to give up", func() bool {
		d.GetJSON(t, "/internal/auto-login/status", "adm", &st)
		return len(st.Instances) == 1 && st.Instances[0].State == "failed"
	})
	if in := st.Instances[0]; in.Attempts != 2 || !strings.Contains(in.LastError, "deadline") {
		t.Errorf("login status %+v, want failed after 2 attempts cut by their deadline", in)
	}

	hd := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", accts, "POOLGATE_HEALTH_INTERVAL=300ms",
		"POOLGATE_LOGIN_HEADLESS=false", "POOLGATE_LOGIN_ATTEMPTS=1", "DISPLAY=")
	var hs struct {
		Instances []struct {
			State     string `json:"state"`
			LastError string `json:"last_error"`
		} `json:"instances"`
	}
	testenv.WaitFor(t, 60*time.Second, "the windowed login to fail without a display", func() bool {
		hd.GetJSON(t, "/internal/auto-login/status", "adm", &hs)
		return len(hs.Instances) == 1 && hs.Instances[0].State == "failed"
	})
	if e := strings.ToLower(hs.Instances[0].LastError); !strings.Contains(e, "display") && !strings.Contains(e, "x server") {
		t.Errorf("windowed login error %q, want the missing display", hs.Instances[0].LastError)
	}
}

// TestPlainBundleImport: the Python gateway's export of a logged-in work
// dir (a base64 tar.gz of the whole dir) moves an account into a daemon
// whose worker is logged out, behind bundle_import_plain; a bundle for
// another account or with a link among the credentials is refused and
// leaves the work dir alone.
func TestPlainBundleImport(t *testing.T) {
	srcDir := t.TempDir()
	src := daemontest.StartDaemon(t, "POOLGATE_DATA_DIR="+srcDir)
	waitAllReady(t, src, 2, 15*time.Second)
	workDir := filepath.Join(srcDir, "workers", "sim-1")
	export := func(account string, extra func(tw *tar.Writer)) []byte {
		raw := tarWorkDir(t, workDir, extra)
		b, _ := json.Marshal(map[string]any{"instance": "sim-1", "account": account, "raw_bytes": len(raw),
			"bundle_b64": base64.StdEncoding.EncodeToString(raw)})
		return b
	}

	off := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", loggedOutSims, "POOLGATE_AUTO_LOGIN=false")
	if code, body := post(t, off.URL+"/internal/session/import?instance=sim-1", "adm", export("demo1", nil)); code != http.StatusForbidden {
		t.Errorf("plain import while off: %d %s", code, body)
	}

	dstDir := t.TempDir()
	d := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm", "POOLGATE_DATA_DIR="+dstDir, loggedOutSims,
		"POOLGATE_AUTO_LOGIN=false", "POOLGATE_BUNDLE_IMPORT_PLAIN=true")
	waitState(t, d, "sim-1", supervisor.StateNeedsLogin, 15*time.Second)
	dstWork := filepath.Join(dstDir, "workers", "sim-1")
	before := testenv.TreeHash(t, dstWork)
	link := func(tw *tar.Writer) {
		_ = tw.WriteHeader(&tar.Header{Name: "./cache/evil", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
	}
	for _, bad := range []struct {
		name string
		body []byte
		code int
	}{
		{"another account", export("mallory", nil), http.StatusConflict},
		{"a link among the credentials", export("demo1", link), http.StatusBadRequest},
	} {
		if code, body := post(t, d.URL+"/internal/session/import?instance=sim-1", "adm", bad.body); code != bad.code {
			t.Errorf("%s: %d %s, want %d", bad.name, code, body, bad.code)
		}
	}
	if after := testenv.TreeHash(t, dstWork); after != before {
		t.Errorf("a refused import changed the work dir")
	}
	code, body := post(t, d.URL+"/internal/session/import?instance=sim-1", "adm", export("demo1", nil))
	if code != http.StatusOK || !strings.Contains(string(body), `"format":"plain"`) {
		t.Fatalf("plain import: %d %s", code, body)
	}
	waitState(t, d, "sim-1", supervisor.StateReady, 15*time.Second)
	if _, err := os.Stat(filepath.Join(dstWork, "logs")); !os.IsNotExist(err) {
		t.Errorf("the import copied more than the credentials: %v", err)
	}
}

// tarWorkDir packs dir as the Python gateway did: every file under it, with
// paths relative to "./", plus a log file and whatever extra adds.
func tarWorkDir(t *testing.T, dir string, extra func(tw *tar.Writer)) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, err := e.Info()
		if err != nil {
			return err
		}
		if !e.IsDir() && !info.Mode().IsRegular() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = "./" + filepath.ToSlash(rel)
		if e.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if e.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	logLine := []byte("2026-11-20 INFO started\n")
	_ = tw.WriteHeader(&tar.Header{Name: "./logs/lingma.log", Mode: 0o644, Size: int64(len(logLine)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(logLine)
	if extra != nil {
		extra(tw)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
