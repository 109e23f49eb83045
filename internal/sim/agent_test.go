package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// agentRun runs the agent CLI mode in this process with args and the
// input in, and returns what it printed.
func agentRun(t *testing.T, env map[string]string, in string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string { return env[k] }
	err = AgentMain(context.Background(), args, getenv, strings.NewReader(in), &out, &errOut)
	return out.String(), errOut.String(), err
}

// The command line is taken as strictly as the real binary takes it.
func TestAgentCommandLine(t *testing.T) {
	cfg := t.TempDir()
	env := map[string]string{"CLAUDE_CONFIG_DIR": cfg, "ANTHROPIC_API_KEY": "k"}
	tests := []struct {
		args    []string
		wantErr string // on stderr; "" for a clean run
	}{
		{[]string{"claude-code", "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose"}, ""},
		{[]string{"claude-code", "-p", "--input-format", "stream-json", "--output-format", "stream-json"}, "requires --verbose"},
		{[]string{"claude-code", "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--bogus"}, "error: unknown option '--bogus'"},
		{[]string{"claude-code", "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--resume", "nonsense"}, "is not a UUID"},
		{[]string{"claude-code", "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose", "--resume", "00000000-0000-4000-a000-000000000000"}, "No conversation found with session ID"},
		{[]string{"claude-code", "auth", "whoami"}, "unknown command"},
	}
	for _, tt := range tests {
		_, stderr, err := agentRun(t, env, "", tt.args...)
		if (err != nil) != (tt.wantErr != "") || !strings.Contains(stderr, tt.wantErr) {
			t.Errorf("%q: error %v, stderr %q; want %q", tt.args, err, stderr, tt.wantErr)
		}
	}
	if err := AgentMain(context.Background(), []string{"no-such-cli"}, func(string) string { return "" }, nil, io.Discard, io.Discard); err == nil {
		t.Error("an unknown dialect was played")
	}
}

func TestAgentAuthStatus(t *testing.T) {
	cfg := t.TempDir()
	for _, tt := range []struct {
		env        map[string]string
		in, method string
	}{
		{map[string]string{"CLAUDE_CONFIG_DIR": cfg}, "false", "none"},
		{map[string]string{"CLAUDE_CONFIG_DIR": cfg, "ANTHROPIC_API_KEY": "k"}, "true", "api_key"},
		{map[string]string{"CLAUDE_CONFIG_DIR": cfg, "CLAUDE_CODE_OAUTH_TOKEN": "t"}, "true", "oauth_token"},
	} {
		out, _, err := agentRun(t, tt.env, "", "claude-code", "auth", "status", "--json")
		var st struct {
			LoggedIn   bool   `json:"loggedIn"`
			AuthMethod string `json:"authMethod"`
		}
		if jerr := json.Unmarshal([]byte(out), &st); jerr != nil || (st.LoggedIn != (tt.in == "true")) ||
			st.AuthMethod != tt.method || (err == nil) != st.LoggedIn {
			t.Errorf("env %v: %s (%v), want loggedIn %s by %s, exit 1 when logged out", tt.env, out, err, tt.in, tt.method)
		}
	}
}

// A session: initialize, a turn, an unknown control request; the turn's
// lines in the real binary's order.
func TestAgentSession(t *testing.T) {
	env := map[string]string{"CLAUDE_CONFIG_DIR": t.TempDir(), "ANTHROPIC_API_KEY": "k", "CLAUDE_CODE_DISABLE_FILE_MENTIONS": "1"}
	in := `{"type":"control_request","request_id":"1","request":{"subtype":"initialize"}}
{"type":"user","message":{"role":"user","content":"hello"},"parent_tool_use_id":null}
{"type":"control_request","request_id":"2","request":{"subtype":"nope"}}
`
	out, stderr, err := agentRun(t, env, in, "claude-code", "-p", "--input-format", "stream-json", "--output-format",
		"stream-json", "--verbose", "--include-partial-messages", "--tools", "")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	var kinds []string // the turn's lines, without the control answers (which come whenever they are asked)
	answers := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m struct{ Type, Subtype, Result string }
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line that is not JSON: %q", line)
		}
		if m.Type == "control_response" {
			answers++
			continue
		}
		kinds = append(kinds, strings.TrimSuffix(m.Type+"/"+m.Subtype, "/"))
		if m.Type == "result" && m.Result != "You said: hello" {
			t.Errorf("result %q", m.Result)
		}
	}
	got := strings.Join(kinds, " ")
	if want := "system/init system/status stream_event stream_event "; !strings.HasPrefix(got, want) ||
		!strings.HasSuffix(got, "assistant stream_event stream_event stream_event result/success") {
		t.Errorf("the turn's lines %s, want init, status, the stream, the message and the result, in that order", got)
	}
	if answers != 2 {
		t.Errorf("%d control answers, want both requests answered", answers)
	}
}
