package qoder_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/qoder"
	"github.com/poolgate/poolgate/pool/worker"
)

// testdata/*.jsonl are what qodercli 1.1.52 printed here, offline, to the
// driver's arguments (cwd and home shown as /work/acct-1):
//
//   - logged-out.jsonl: a session with no login, asked to initialize;
//   - logged-in.jsonl: a session with a stored login, asked to initialize,
//     for mcp_status and for a control request it lacks, then a turn (the
//     vendor out of reach), /clear, and an interrupt;
//   - retries.jsonl: the same with its model retries at 2 and its hooks
//     on (the bundled security plugin's), to see the retry lines.
//
// Every line is in the driver's model, and the simulator prints the same
// messages, in the same order, for what it plays.

func transcript(t *testing.T, name string) []*agentcli.Message {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*agentcli.Message
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m, err := agentcli.Parse([]byte(l), qoder.Vocabulary())
		if err != nil {
			t.Errorf("%s: a line outside the driver's model: %v\n%s", name, err, l)
			continue
		}
		out = append(out, m)
	}
	return out
}

// kinds are the messages' type/subtype, a control answer's with its
// outcome.
func kinds(ms []*agentcli.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Type + "/" + m.Subtype
		switch {
		case m.Response != nil:
			out[i] += m.Response.Subtype
		case m.Type == agentcli.TypeResult && m.IsError:
			out[i] += "!"
		case m.Type == agentcli.TypeAssistant && m.Error != "":
			out[i] += m.Error
		}
	}
	return out
}

func TestRealTranscripts(t *testing.T) {
	for _, name := range []string{"logged-out.jsonl", "logged-in.jsonl", "retries.jsonl"} {
		ms := transcript(t, name)
		if len(ms) == 0 {
			t.Errorf("%s: empty", name)
		}
	}
	out := kinds(transcript(t, "logged-out.jsonl"))
	want := []string{"system/init", "assistant/authentication_failed", "result/success!"}
	if !slices.Equal(out, want) {
		t.Errorf("logged out: %v, want %v", out, want)
	}
	// Each step: a line in, and how many messages it is answered with.
	type step struct {
		in string
		n  int
	}
	initialize := `{"type":"control_request","request_id":"pg-1","request":{"subtype":"initialize"}}`
	tests := []struct {
		name, file string
		login      bool
		steps      []step
	}{
		{"logged out", "logged-out.jsonl", false, []step{{initialize, 3}}},
		{"logged in", "logged-in.jsonl", true, []step{{initialize, 3},
			{`{"type":"control_request","request_id":"pg-2","request":{"subtype":"mcp_status"}}`, 1},
			{`{"type":"control_request","request_id":"pg-3","request":{"subtype":"get_binary_version"}}`, 1},
			{`{"type":"user","message":{"role":"user","content":"hello [[sim:error]]"},"parent_tool_use_id":null}`, 3},
			{`{"type":"user","message":{"role":"user","content":"/clear"},"parent_tool_use_id":null}`, 2},
			{`{"type":"control_request","request_id":"pg-4","request":{"subtype":"interrupt"}}`, 1}}},
	}
	for _, tt := range tests {
		var sim []*agentcli.Message
		run := simulate(t, tt.login)
		for _, st := range tt.steps {
			sim = append(sim, run(st.in, st.n)...)
		}
		real := kinds(transcript(t, tt.file))[:len(sim)]
		if got := kinds(sim); !slices.Equal(got, real) {
			t.Errorf("%s: the simulator printed\n%v\nqodercli\n%v", tt.name, got, real)
		}
	}
}

// simulate starts the simulated qodercli with the driver's arguments; the
// function it returns sends a line and reads the n messages that answer
// it.
func simulate(t *testing.T, login bool) func(in string, n int) []*agentcli.Message {
	t.Helper()
	dir := t.TempDir()
	if login {
		storeLogin(t, dir, "demo@example.com")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	args := append([]string{"qoder"}, qoder.New(qoder.DefaultSettings(), agentcli.Config{ExtraArgs: []string{"--directives"}}).Driver.Command(
		worker.Endpoint{Name: "q1", WorkDir: dir})...)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Dir = dir
	cmd.Env = []string{simEnv + "=1", "HOME=" + dir, "QODER_CONFIG_DIR=" + filepath.Join(dir, "config")}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); cancel() })
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	return func(in string, n int) []*agentcli.Message {
		if _, err := stdin.Write([]byte(in + "\n")); err != nil {
			t.Fatal(err)
		}
		var out []*agentcli.Message
		for len(out) < n && sc.Scan() {
			var m agentcli.Message
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("the simulator printed %q", sc.Text())
			}
			out = append(out, &m)
		}
		return out
	}
}
