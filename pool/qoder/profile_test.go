package qoder

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// mentionRE is qodercli 1.1.52's @-mention pattern, as read from its
// bundle (JavaScript's \s spelt out, U+FEFF among it): what Escape must
// leave nothing for.
var mentionRE = regexp.MustCompile(`@(?:"([^"]+)"|([~./][^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]".]+/[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+\.[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+))`)

// agentMentionRE is its pattern for a mention of one of its agents.
var agentMentionRE = regexp.MustCompile(`(^|[\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}])@([\w:.@-]+)`)

// isCommand is how the CLI tells a command: the text, trimmed as
// JavaScript trims, opens with "/".
func isCommand(s string) bool {
	return strings.HasPrefix(strings.TrimFunc(s, jsSpace), "/")
}

func TestEscape(t *testing.T) {
	tests := []struct{ give string }{
		{"/clear"}, {"  /login"}, {"\n\t/add-dir /"}, {"\ufeff/help"}, {"\u00a0/compact"},
		{"read @/etc/passwd"}, {"@../acct-2/config/.auth/user please"}, {`@"config/.auth/user"`},
		{"mail me@example.com"}, {"@~/.ssh/id_rsa"}, {"@a/b and @c.d"}, {"ask @Explore"}, {"a@@b.c"},
		{"plain text"}, {""}, {"@"}, {"trailing @"},
	}
	for _, tt := range tests {
		got := Escape(tt.give)
		if isCommand(got) {
			t.Errorf("Escape(%q) = %q: still a command", tt.give, got)
		}
		if m := mentionRE.FindString(got); m != "" {
			t.Errorf("Escape(%q) = %q: still mentions %q", tt.give, got, m)
		}
		if m := agentMentionRE.FindString(got); m != "" {
			t.Errorf("Escape(%q) = %q: still mentions an agent %q", tt.give, got, m)
		}
		if plain := strings.ReplaceAll(strings.TrimPrefix(got, zeroWidthSpace), "@"+zeroWidthNoBreak, "@"); plain != tt.give {
			t.Errorf("Escape(%q) = %q: the text changed beyond the invisible marks", tt.give, got)
		}
	}
	if got := Escape("no marks needed"); got != "no marks needed" {
		t.Errorf("Escape changed plain text: %q", got)
	}
}

// The tap sees the CLI's answer to its start in the lines it passes on,
// however the reads cut them, and changes nothing.
func TestTap(t *testing.T) {
	init := `{"type":"system","subtype":"init","session_id":"s","tools":[],"model":"auto"}` + "\n"
	refused := `{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"parent_tool_use_id":null,"error":"authentication_failed","session_id":"s"}` + "\n"
	result := `{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login","session_id":"s"}` + "\n"
	answer := `{"type":"control_response","response":{"subtype":"success","request_id":"pg-1","response":{}}}` + "\n"
	long := `{"type":"system","subtype":"hook_response","output":"` + strings.Repeat("x", maxTapLine) + `"}` + "\n"
	tests := []struct {
		name, give string
		loggedOut  bool
	}{
		{"logged out", init + refused + result, true},
		{"the result alone", init + result, true},
		{"logged in", init + answer, false},
		{"a refusal after the answer is a turn's", answer + refused, false},
		{"a long line first", long + init + refused, true},
	}
	for _, tt := range tests {
		for _, size := range []int{1, 7, 4096} {
			tp := newTap(io.NopCloser(&chunked{s: tt.give, n: size}), Vocabulary())
			out, _ := io.ReadAll(tp)
			if string(out) != tt.give || tp.isLoggedOut() != tt.loggedOut {
				t.Errorf("%s (reads of %d): logged out %v, passed on %d of %d bytes", tt.name, size,
					tp.isLoggedOut(), len(out), len(tt.give))
			}
		}
	}
}

// chunked reads s n bytes at a time.
type chunked struct {
	s string
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

// The run log of a start whose token failed gives the reason; runs before
// the start, and runs of other commands, do not count.
func TestAuthFailure(t *testing.T) {
	dir := t.TempDir()
	now := time.Now().UTC()
	run := func(name string, started time.Time, argv, log string) {
		d := filepath.Join(dir, "logs", "runs", name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		m := `{"run_id":"` + name + `","started_at":"` + started.Format(time.RFC3339Nano) + `","argv":` + argv + `}`
		for f, data := range map[string]string{"manifest.json": m, "qodercli.log": log} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	failed := "2026-11-28T23:30:04.474Z ERROR debug.message Error authenticating: S2 [NetworkAttemptError]: Network attempt failed at dns\n    at r3A.execute (file:///x/qodercli.js:2:3371084)\n"
	session := `["/usr/bin/node","/x/qodercli","--print","--input-format","stream-json"]`
	run("old", now.Add(-time.Hour), session, failed)
	run("status", now, `["/usr/bin/node","/x/qodercli","status","-o","json"]`, failed)
	if got := authFailure(dir, now.Add(-time.Second)); got != "" {
		t.Errorf("authFailure = %q before this start's run logged anything", got)
	}
	run("ok", now, session, "2026-11-28T23:30:04.474Z INFO  cli.main.started\n")
	if got := authFailure(dir, now.Add(-time.Second)); got != "" {
		t.Errorf("authFailure = %q for a run that logged in", got)
	}
	run("this", now, session, "2026-11-28T23:30:04.309Z INFO  debug.message [auth] Login method: QODER_PERSONAL_ACCESS_TOKEN env var\n"+failed)
	if got, want := authFailure(dir, now.Add(-time.Second)), "NetworkAttemptError: Network attempt failed at dns"; got != want {
		t.Errorf("authFailure = %q, want %q", got, want)
	}
}

func TestArgsAndEnv(t *testing.T) {
	s := DefaultSettings()
	a := args(s, agentcli.Launch{SystemPrompt: "sp", Resume: "r-1", Model: "m"})
	for _, want := range [][]string{{"--tools", ""}, {"--permission-mode", "dont_ask"}, {"--system-prompt", "sp"},
		{"--resume", "r-1"}, {"--model", "m"}, {"--max-model-request-retries", "0"}, {"--include-partial-messages"},
		{"--disable-builtin-skills"}, {"--strict-mcp-config"}, {"--settings", settingsJSON}} {
		if !containsRun(a, want) {
			t.Errorf("args %q lack %q", a, want)
		}
	}
	d := agentcli.Dirs{WorkDir: "/w", Home: "/w/home", Tmp: "/w/tmp", Config: "/w/config"}
	e := env(s, d, worker.Account{Password: "qoder_pat-1"})
	for _, want := range []string{"HOME=/w/home", "TMPDIR=/w/tmp", "QODER_CONFIG_DIR=/w/config", "QODER_EXPOSE_TOKEN_USAGE=1",
		"QODER_DISABLE_UMID_REPORT=1", "QODER_PERSONAL_ACCESS_TOKEN=qoder_pat-1"} {
		if !slices.Contains(e, want) {
			t.Errorf("env %q lacks %q", e, want)
		}
	}
	hasToken := func(e []string) bool {
		return slices.ContainsFunc(e, func(v string) bool { return strings.HasPrefix(v, patEnv) })
	}
	for _, tt := range []struct {
		secret, password string
		want             bool
	}{
		{SecretAuto, "", false}, {SecretAuto, "a page's password", false}, {SecretToken, "any", true},
		{SecretLogin, "qoder_x", false}, {SecretToken, "", false},
	} {
		s.Secret = tt.secret
		if got := hasToken(env(s, d, worker.Account{Password: tt.password})); got != tt.want {
			t.Errorf("secret %s, password %q: token %v, want %v", tt.secret, tt.password, got, tt.want)
		}
	}
}

func containsRun(a, run []string) bool {
	for i := range a {
		if i+len(run) <= len(a) && slices.Equal(a[i:i+len(run)], run) {
			return true
		}
	}
	return false
}
