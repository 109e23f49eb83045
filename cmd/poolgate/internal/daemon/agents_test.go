package daemon

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/agents"
)

var captureAgents = flag.Bool("capture-agents", false,
	"write the requests the agents send to internal/agents/testdata (make agents-capture)")

const agentsKey = "sk-agents"

// errorRE finds an error report in a client's output.
var errorRE = regexp.MustCompile(`(?i)\berror\b`)

// The released coding agents, run as a user runs them against the daemon
// on its simulated pool: a plain turn, a turn with a tool call the client
// really executes, and a follow-up of that conversation that reuses its
// upstream session. Every request they send goes through a recording proxy
// and must be answered 200: a client that quietly retries a refused
// request with fewer features would otherwise hide the refusal.
func TestAgentsEndToEnd(t *testing.T) {
	clients := agents.Clients()
	for _, c := range clients {
		if _, err := c.Path(); err != nil {
			t.Fatal(err)
		}
	}
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+agentsKey, "POOLGATE_METRICS_PUBLIC=true")
	d.WaitReady(t, 20*time.Second)
	rec, err := agents.NewRecorder(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	for _, c := range clients {
		t.Run(c.Name, func(t *testing.T) {
			hits := func() float64 { return scrape(t, d, "poolgate_session_cache_hits_total") }
			runAgent(t, rec, proxy.URL, c, hits, nil)
			for _, ex := range rec.Exchanges() {
				if ex.Client == c.Name && ex.Status != http.StatusOK {
					t.Errorf("%s %s (%s) was answered %d", ex.Method, ex.Path, ex.Scenario, ex.Status)
				}
			}
		})
	}
	if *captureAgents && !t.Failed() {
		for _, c := range clients {
			if !ran(rec, c) {
				continue // left out by -run: its recordings stay as they are
			}
			if err := agents.WriteFixtures(filepath.Join("..", "..", "internal", "agents", agents.TestdataDir), c, rec.Exchanges()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// ran says whether the recorder saw c's requests.
func ran(rec *agents.Recorder, c agents.Client) bool {
	for _, ex := range rec.Exchanges() {
		if ex.Client == c.Name {
			return true
		}
	}
	return false
}

// toolCall is the directive that makes the simulated worker call the
// client's own file-reading tool on path.
func toolCall(c agents.Client, work string) string {
	abs := filepath.Join(work, "hello.txt")
	switch c.Name {
	case "claude-code":
		return fmt.Sprintf(`[[sim:call=Read {"file_path":%q}]]`, abs)
	case "codex":
		return `[[sim:call=exec_command {"cmd":"cat hello.txt"}]]`
	default:
		return fmt.Sprintf(`[[sim:call=read_file {"file_path":%q}]]`, abs)
	}
}

// runAgent runs c's three scenarios through the recorder at url. hits
// reads the gateway's session cache hits; beforeFollowUp, when set, runs
// between the tool turn and the follow-up.
func runAgent(t *testing.T, rec *agents.Recorder, url string, c agents.Client, hits func() float64, beforeFollowUp func()) {
	home, work := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "hello.txt"), []byte("hello world\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := agents.NewSession(c, home, work, agents.Gateway{URL: url, APIKey: agentsKey})
	if err != nil {
		t.Fatal(err)
	}
	run := func(scenario, prompt string, resume bool, id string) (string, string) {
		t.Helper()
		rec.Scenario(c, scenario)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := s.Run(ctx, prompt, resume, id)
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		out := res.Stdout + res.Stderr
		if res.ExitCode != 0 || errorRE.MatchString(out) {
			t.Fatalf("%s: %s %q exited %d after %s:\n%s", scenario, c.Bin, res.Args, res.ExitCode, res.Duration, out)
		}
		answer, sid, err := s.Answer(res)
		if err != nil {
			t.Fatalf("%s: %v", scenario, err)
		}
		t.Logf("%s: %s in %s", scenario, strings.TrimSpace(answer), res.Duration.Round(time.Millisecond))
		return answer, sid
	}
	if answer, _ := run("plain", "hello", false, ""); !strings.Contains(answer, "You said: hello") {
		t.Errorf("plain turn answered %q", answer)
	}
	// The worker asks for the file; only the client can read it, so its
	// content in the answer shows the call and its result made the round trip.
	answer, sid := run("tool", "show me hello.txt "+toolCall(c, work), false, "")
	if !strings.Contains(answer, "returned:") || !strings.Contains(answer, "hello world") {
		t.Errorf("tool turn answered %q, want the tool result quoted", answer)
	}
	if beforeFollowUp != nil {
		beforeFollowUp()
	}
	before := hits()
	answer, _ = run("follow-up", "and again [[sim:whoami]]", true, sid)
	if !strings.Contains(answer, "reply=true") {
		t.Errorf("follow-up answered %q, want it served on the upstream session (reply=true)", answer)
	}
	if got := hits(); got <= before {
		t.Errorf("session cache hits %v -> %v, want the follow-up counted", before, got)
	}
}

// Every recorded request of the pinned clients is answered by the real
// handlers: it decodes, its prompt renders, a simulated worker answers, and
// the answer ends the way the client's protocol ends a turn.
func TestAgentFixturesReplay(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+agentsKey)
	d.WaitReady(t, 20*time.Second)
	for _, c := range agents.Clients() {
		t.Run(c.Name, func(t *testing.T) {
			fixtures, err := agents.Fixtures(c)
			if err != nil {
				t.Fatal(err)
			}
			if len(fixtures) < 3 {
				t.Fatalf("%d recorded requests of %s, want at least 3 (run make agents-capture)", len(fixtures), c.Name)
			}
			for i, ex := range fixtures {
				if ex.Version != c.Version {
					t.Fatalf("request %d was recorded from %s %s, the pinned release is %s: run make agents-capture", i+1, c.Name, ex.Version, c.Version)
				}
				replay(t, d, c, i+1, ex)
			}
		})
	}
}

// terminal is how each protocol ends a turn, streamed or not.
var terminal = map[string][2]string{
	"messages":  {"event: message_stop\n", `"stop_reason":`},
	"responses": {"event: response.completed\n", `"status":"completed"`},
	"chat":      {"data: [DONE]\n", `"finish_reason":`},
	"gemini":    {`"finishReason":"`, `"finishReason":"`},
}

func replay(t *testing.T, d *daemontest.Daemon, c agents.Client, n int, ex agents.Exchange) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, ex.Method, d.URL+ex.Path, bytes.NewReader(ex.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = ex.Header.Clone()
	req.Header.Set("Authorization", "Bearer "+agentsKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("request %d (%s): %v", n, ex.Scenario, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	want := terminal[c.Protocol][1]
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		want = terminal[c.Protocol][0]
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("request %d (%s) answered %d without %q:\n%s", n, ex.Scenario, resp.StatusCode, want, firstLines(body, 12))
	}
}

func firstLines(b []byte, n int) string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() && len(out) < n {
		out = append(out, sc.Text())
	}
	return strings.Join(out, "\n")
}
