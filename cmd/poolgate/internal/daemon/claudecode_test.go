package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	anth "github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"google.golang.org/genai"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/agents"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/claudecode"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Claude Code as the worker: a pool of real `claude` processes (the
// pinned release, from `make agents`), whose upstream is a second daemon on
// the bundled simulator serving the Anthropic API (each account's env
// points ANTHROPIC_BASE_URL at it). Every line the real binary printed is
// recorded and read back through the driver's model of the protocol.

// ccKey is the key the tests' own clients use (the protocol tests' key,
// whose helpers they share); the agents present agentsKey.
const ccKey, ccAdmin = "sk-1", "adm-cc"

// refusedProxy is a loopback port nothing listens on: the workers reach
// only loopback addresses.
const refusedProxy = "http://127.0.0.1:9"

// claudeBin is the pinned Claude Code, or the test fails saying how to
// install it.
func claudeBin(t *testing.T) string {
	t.Helper()
	for _, c := range agents.Clients() {
		if c.Name == "claude-code" {
			p, err := c.Path()
			if err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	t.Fatal("internal/agents names no claude-code client")
	return ""
}

// ccPool is a daemon of claude-code workers and the simulated upstream
// they talk to.
type ccPool struct {
	up, d   *daemontest.Daemon
	dataDir string
}

// ccAccount is an account whose Claude Code reaches only the upstream at
// up (an API key of its own: no login needed).
func ccAccount(name, up string) map[string]any {
	return map[string]any{"name": name, "env": map[string]string{"ANTHROPIC_BASE_URL": up,
		"ANTHROPIC_API_KEY": "sk-upstream-" + name, "HTTPS_PROXY": refusedProxy, "HTTP_PROXY": refusedProxy,
		"NO_PROXY": "127.0.0.1,localhost"}}
}

// startCCPool starts the upstream and a pool of the accounts (ccAccount's
// unless given), with transcripts recorded and checked at the end.
func startCCPool(t *testing.T, accounts []map[string]any, env ...string) *ccPool {
	t.Helper()
	bin := claudeBin(t)
	p := &ccPool{dataDir: t.TempDir()}
	p.up = daemontest.StartDaemon(t)
	p.up.WaitReady(t, 20*time.Second)
	if accounts == nil {
		accounts = []map[string]any{ccAccount("cc-1", p.up.URL), ccAccount("cc-2", p.up.URL)}
	}
	b, err := json.Marshal(accounts)
	if err != nil {
		t.Fatal(err)
	}
	p.d = daemontest.StartDaemon(t, append([]string{"POOLGATE_DRIVER=claude-code", "POOLGATE_WORKER_BIN=" + bin,
		"POOLGATE_ACCOUNTS=" + string(b), "POOLGATE_DATA_DIR=" + p.dataDir, "POOLGATE_API_KEYS=" + ccKey + "," + agentsKey,
		"POOLGATE_ADMIN_TOKEN=" + ccAdmin, "POOLGATE_METRICS_PUBLIC=true", "POOLGATE_CLAUDE_CODE_RECORD=true",
		"POOLGATE_HEALTH_INTERVAL=1s", "POOLGATE_HEALTH_TIMEOUT=2s", "POOLGATE_START_TIMEOUT=30s"}, env...)...)
	t.Cleanup(func() { checkTranscripts(t, p.dataDir) })
	return p
}

// checkTranscripts reads back every line the workers printed through the
// driver's model of the protocol: an unknown or unparsed one fails the
// test.
func checkTranscripts(t *testing.T, dataDir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dataDir, "workers", "*", "transcripts", "*.jsonl"))
	voc := claudecode.Profile(claudecode.SecretAuto).Vocabulary
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
				t.Errorf("%s: a transcript line that is not one: %v", f, err)
				continue
			}
			if tl.Dir != "out" {
				continue
			}
			lines++
			m, err := agentcli.Parse([]byte(tl.Line), voc)
			if err != nil {
				t.Errorf("Claude Code printed a line outside the driver's model: %v\n%s", err, tl.Line)
				continue
			}
			types[m.Type+"/"+m.Subtype]++
		}
		fh.Close()
	}
	if lines == 0 && !t.Failed() {
		t.Error("no line of Claude Code was recorded")
	}
	t.Logf("%d lines from Claude Code in %d transcripts, all in the model: %v", lines, len(files), types)
}

// instances are the pool's instances by name.
func (p *ccPool) instances(t *testing.T) map[string]instanceView {
	t.Helper()
	out := map[string]instanceView{}
	for _, in := range poolState(t, p.d, ccAdmin).Instances {
		out[in.Name] = instanceView{state: in.State, pid: in.PID, restarts: in.Restarts, lastErr: in.LastError}
	}
	return out
}

type instanceView struct {
	state    supervisor.State
	pid      int
	restarts int
	lastErr  string
}

// ask sends one chat completion of msgs and returns its text and the
// instance that served it.
func (p *ccPool) ask(t *testing.T, msgs []map[string]any) (string, string) {
	t.Helper()
	c := send(t, p.d, "/v1/chat/completions", ccKey, map[string]any{"model": "default", "messages": msgs})
	if c.code != http.StatusOK {
		t.Fatalf("chat completion: %d %s", c.code, c.body)
	}
	return content(t, c), c.header.Get("X-Poolgate-Instance")
}

// turnsReused counts the daemon's turn log lines that continued a session.
func turnsReused(d *daemontest.Daemon) int {
	return strings.Count(d.Log(), "msg=turn ") - strings.Count(d.Log(), "reused=false")
}

func TestClaudeCodeWorkers(t *testing.T) {
	p := startCCPool(t, nil)
	p.d.WaitReady(t, 60*time.Second)
	testenv.WaitFor(t, 60*time.Second, "both Claude Code workers ready", func() bool {
		in := p.instances(t)
		return in["cc-1"].state == supervisor.StateReady && in["cc-2"].state == supervisor.StateReady
	})

	t.Run("sdks", func(t *testing.T) { ccSDKs(t, p) })
	t.Run("tool round trip", func(t *testing.T) { ccToolRoundTrip(t, p) })
	t.Run("follow-ups", func(t *testing.T) { ccFollowUps(t, p) })
	t.Run("affinity", func(t *testing.T) { ccAffinity(t, p) })
	t.Run("agents", func(t *testing.T) { ccAgents(t, p) })
	t.Run("killed mid-turn", func(t *testing.T) { ccKilledMidTurn(t, p) })
	t.Run("hung", func(t *testing.T) { ccHung(t, p) })
}

// The official SDKs of the three protocols, plain and streamed.
func ccSDKs(t *testing.T, p *ccPool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	oc := sdk(p.d, ccKey)
	resp, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "default",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello openai")}})
	if err != nil || resp.Choices[0].Message.Content != "You said: hello openai" || resp.Usage.CompletionTokens == 0 {
		t.Errorf("openai: %v %+v", err, resp)
	}
	stream := oc.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "default",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("streamed openai [[sim:chunks=4]]")}})
	var text strings.Builder
	chunks := 0
	for stream.Next() {
		if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
			text.WriteString(ch.Choices[0].Delta.Content)
			chunks++
		}
	}
	if stream.Err() != nil || text.String() != "You said: streamed openai" || chunks < 2 {
		t.Errorf("openai stream: %v, %q in %d chunks", stream.Err(), text.String(), chunks)
	}

	ac := anthClient(p.d)
	plain, streamed := anthBoth(t, ac, anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock("hello anthropic"))}})
	if anthText(plain) != "You said: hello anthropic" || anthText(streamed) != anthText(plain) || plain.StopReason != "end_turn" {
		t.Errorf("anthropic: plain %q (%s), streamed %q", anthText(plain), plain.StopReason, anthText(streamed))
	}

	gc := geminiSDK(t, p.d, ccKey)
	g, err := gc.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("hello gemini"), nil)
	if err != nil || g.Text() != "You said: hello gemini" {
		t.Errorf("gemini: %v %+v", err, g)
	}
	var gtext strings.Builder
	for r, err := range gc.Models.GenerateContentStream(ctx, "gemini-2.5-flash", genai.Text("streamed gemini"), nil) {
		if err != nil {
			t.Fatalf("gemini stream: %v", err)
		}
		gtext.WriteString(r.Text())
	}
	if gtext.String() != "You said: streamed gemini" {
		t.Errorf("gemini stream: %q", gtext.String())
	}
}

// A tool the caller offers comes back as a tool call, and its result is
// quoted in the next turn, which continues the CLI's session.
func ccToolRoundTrip(t *testing.T, p *ccPool) {
	tools := map[string]any{"tools": []any{tool("get_weather"), tool("get_time")}}
	body := chatBody("default", `Weather in Paris? [[sim:call=get_weather {"city":"Paris"}]]`, tools)
	c := send(t, p.d, "/v1/chat/completions", ccKey, body)
	var r struct {
		Choices []struct {
			Message      map[string]any `json:"message"`
			FinishReason string         `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal([]byte(c.body), &r); err != nil || len(r.Choices) != 1 || r.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("tool turn: %d %s", c.code, c.body)
	}
	calls, _ := r.Choices[0].Message["tool_calls"].([]any)
	call, _ := calls[0].(map[string]any)
	fn, _ := call["function"].(map[string]any)
	if len(calls) != 1 || fn["name"] != "get_weather" || fn["arguments"] != `{"city":"Paris"}` {
		t.Fatalf("tool calls %v, want get_weather(Paris)", calls)
	}
	before := turnsReused(p.d)
	body["messages"] = append(body["messages"].([]map[string]any), r.Choices[0].Message,
		map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "18C and sunny"})
	c2 := send(t, p.d, "/v1/chat/completions", ccKey, body)
	if got := content(t, c2); !strings.Contains(got, "returned: 18C and sunny") {
		t.Errorf("after the result: %q, want it quoted", got)
	}
	// The turn's log line may come a moment after its answer.
	testenv.WaitFor(t, 5*time.Second, "the tool result's turn logged as reused", func() bool {
		return turnsReused(p.d) == before+1
	})
}

// Ten turns of one conversation: each follow-up continues the Claude Code
// session, which continues its upstream session (the upstream's whoami
// counts the turns), on the instance that served the first.
func ccFollowUps(t *testing.T, p *ccPool) {
	var msgs []map[string]any
	before := turnsReused(p.d)
	first := ""
	for i := 1; i <= 10; i++ {
		msgs = append(msgs, map[string]any{"role": "user", "content": fmt.Sprintf("turn %d [[sim:whoami]]", i)})
		got, inst := p.ask(t, msgs)
		w := parseWhoami(t, got)
		if w.turn != i || w.reply != (i > 1) {
			t.Fatalf("turn %d: upstream says %+v, want its turn %d continued", i, w, i)
		}
		if first == "" {
			first = inst
		} else if inst != first {
			t.Fatalf("turn %d served by %s, the conversation's first by %s", i, inst, first)
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": got})
	}
	testenv.WaitFor(t, 5*time.Second, "9 follow-ups logged as reused", func() bool {
		return turnsReused(p.d)-before == 9
	})
}

// Conversations spread over the two accounts; each stays on its own. New
// conversations are spread by a hash seeded per process, so as many are
// opened as it takes to see both accounts (a bounded number: the chance
// that 16 land on one account is 2^-15).
func ccAffinity(t *testing.T, p *ccPool) {
	var convs [][]map[string]any
	var owner []string
	used := map[string]bool{}
	ask := func(i, round int) string {
		t.Helper()
		convs[i] = append(convs[i], map[string]any{"role": "user", "content": fmt.Sprintf("c%d r%d [[sim:whoami]]", i, round)})
		got, inst := p.ask(t, convs[i])
		if w := parseWhoami(t, got); w.turn != round {
			t.Fatalf("conversation %d round %d: %+v", i, round, w)
		}
		convs[i] = append(convs[i], map[string]any{"role": "assistant", "content": got})
		return inst
	}
	for i := 0; len(convs) < 4 || len(used) < 2 && len(convs) < 16; i++ {
		convs, owner = append(convs, nil), append(owner, "")
		owner[i] = ask(i, 1)
		used[owner[i]] = true
	}
	if len(used) != 2 {
		t.Fatalf("%d new conversations served by %v, want both accounts", len(convs), used)
	}
	for round := 2; round <= 3; round++ {
		for i := range convs {
			if inst := ask(i, round); inst != owner[i] {
				t.Fatalf("conversation %d moved from %s to %s", i, owner[i], inst)
			}
		}
	}
}

// Claude Code, Codex CLI and Gemini CLI as clients of the pool of Claude
// Code workers: a plain turn, a tool the client runs, and a follow-up that
// continues the session down to the upstream.
func ccAgents(t *testing.T, p *ccPool) {
	rec, err := agents.NewRecorder(p.d.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	for _, c := range agents.Clients() {
		if c.Name == "qwen-code" {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			runAgent(t, rec, proxy.URL, c, func() float64 { return scrape(t, p.d, "poolgate_session_cache_hits_total") }, nil)
			for _, ex := range rec.Exchanges() {
				if ex.Client == c.Name && ex.Status != http.StatusOK {
					t.Errorf("%s %s (%s) was answered %d", ex.Method, ex.Path, ex.Scenario, ex.Status)
				}
			}
		})
	}
}

// A worker killed in the middle of a streamed turn: the stream ends
// without its normal end, and the worker comes back.
func ccKilledMidTurn(t *testing.T, p *ccPool) {
	body, _ := json.Marshal(map[string]any{"model": "default", "stream": true, "messages": []map[string]any{
		{"role": "user", "content": "long [[sim:words=80]] [[sim:chunk-delay=100ms]]"}}})
	req, _ := http.NewRequest(http.MethodPost, p.d.URL+"/v1/chat/completions", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+ccKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	inst := resp.Header.Get("X-Poolgate-Instance")
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.Contains(sc.Text(), `"content":"said: "`) {
	}
	before := p.instances(t)[inst]
	killed := killWorkDir(t, filepath.Join(p.dataDir, "workers", inst))
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if strings.Contains(rest.String(), "[DONE]") && !strings.Contains(rest.String(), "error") {
		t.Errorf("after its worker (%d processes) was killed, the stream ended normally:\n%s", killed, rest.String())
	}
	testenv.WaitFor(t, 60*time.Second, inst+" back with a new process", func() bool {
		in := p.instances(t)[inst]
		return in.state == supervisor.StateReady && in.pid != before.pid
	})
	if got, _ := p.ask(t, []map[string]any{{"role": "user", "content": "after the kill"}}); got != "You said: after the kill" {
		t.Errorf("after the kill: %q", got)
	}
}

// killWorkDir kills every Claude Code process running in dir, the
// worker's own and those its driver spawned, and says how many.
func killWorkDir(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, pid := range processesIn(dir) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no process runs in %s", dir)
	}
	return n
}

// processesIn lists the processes whose working directory is dir.
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err == nil && cwd == dir {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A hung worker (its process stopped): its health checks fail and the
// supervisor replaces it, while the other account serves.
func ccHung(t *testing.T, p *ccPool) {
	before := p.instances(t)["cc-1"]
	if err := syscall.Kill(before.pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(before.pid, syscall.SIGCONT)
	testenv.WaitFor(t, 30*time.Second, "the hung worker out of rotation", func() bool {
		return p.instances(t)["cc-1"].state != supervisor.StateReady
	})
	if got, inst := p.ask(t, []map[string]any{{"role": "user", "content": "while one hangs"}}); got != "You said: while one hangs" || inst != "cc-2" {
		t.Errorf("while cc-1 hangs: %q from %s, want the other account's answer", got, inst)
	}
	testenv.WaitFor(t, 60*time.Second, "the hung worker replaced", func() bool {
		in := p.instances(t)["cc-1"]
		return in.state == supervisor.StateReady && in.pid != before.pid
	})
}

// Workers that cannot serve: one whose Claude Code exits at start (an
// option it lacks) fails with the binary's words; one without a login is
// needs_login, without restarts, and hands out the URL the binary's own
// login prints.
func TestClaudeCodeWorkersThatCannotServe(t *testing.T) {
	accounts := []map[string]any{
		{"name": "bad-args", "args": []string{"--no-such-option"}, "env": map[string]string{"ANTHROPIC_API_KEY": "sk-x",
			"HTTPS_PROXY": refusedProxy, "HTTP_PROXY": refusedProxy}},
		{"name": "no-login", "env": map[string]string{"HTTPS_PROXY": refusedProxy, "HTTP_PROXY": refusedProxy}},
	}
	p := startCCPool(t, accounts, "POOLGATE_AUTO_LOGIN=false")
	testenv.WaitFor(t, 60*time.Second, "no-login needs a login; bad-args failed with the binary's reason", func() bool {
		in := p.instances(t)
		return in["no-login"].state == supervisor.StateNeedsLogin && in["bad-args"].state == supervisor.StateFailed &&
			strings.Contains(in["bad-args"].lastErr, "unknown option '--no-such-option'")
	})
	time.Sleep(3 * time.Second) // three health checks
	if in := p.instances(t)["no-login"]; in.state != supervisor.StateNeedsLogin || in.restarts != 0 {
		t.Errorf("no-login: %s after %d restarts, want needs_login without a restart", in.state, in.restarts)
	}
	var u struct {
		URL string `json:"url"`
	}
	if code := p.d.GetJSON(t, "/internal/auto-login/url?instance=no-login", ccAdmin, &u); code != http.StatusOK ||
		!regexp.MustCompile(`^https://claude\.(com|ai)/.*oauth/authorize\?`).MatchString(u.URL) {
		t.Errorf("login URL: %d %q, want the one Claude Code's own login prints", code, u.URL)
	}
	c := send(t, p.d, "/v1/chat/completions", ccKey, chatBody("default", "hello", nil))
	if c.code == http.StatusOK || c.code == http.StatusBadGateway {
		t.Errorf("a turn with no account able to serve: %d %s, want no worker's error", c.code, c.body)
	}
}
