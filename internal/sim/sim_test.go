package sim

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

func TestMainLifecycle(t *testing.T) {
	p1, p2 := testenv.FreePort(t), testenv.FreePort(t)
	args := []string{"start", "--transportType=websocket", "--workDir=" + t.TempDir(),
		"--socketPort=" + strconv.Itoa(p1), "--httpPort=" + strconv.Itoa(p2), "--logged-in"}
	stderr := &testenv.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Main(ctx, args, func(string) string { return "" }, io.Discard, stderr) }()
	want := fmt.Sprintf("simworker listening\" socket=%d http=%d", p1, p2)
	poll(t, want, func() bool { return strings.Contains(stderr.String(), want) })
	var st authStatus
	dial(t, &harness{socket: p1}).result("auth/status", map[string]any{}, &st)
	if st.Status != 2 {
		t.Errorf("auth/status = %+v, want 2", st)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Main after cancel = %v, want nil", err)
		}
	case <-time.After(wait):
		t.Fatal("Main did not return after cancel")
	}
}

func TestParseArgs(t *testing.T) {
	env := func(k string) string {
		if k == "SIMWORKER_ACCOUNTS" {
			return "env:pw"
		}
		return ""
	}
	type want struct {
		http     int
		loggedIn string
		accounts string
		page     string
	}
	tests := []struct {
		name string
		give []string
		want want
	}{
		{"defaults", []string{"start", "--workDir=d"}, want{accounts: "env:pw", page: "plain"}},
		{"port alias", []string{"--protocol=openai", "--port=7"}, want{http: 7, accounts: "env:pw", page: "plain"}},
		{"logged in first", []string{"--workDir=d", "--accounts=a:1,b:2", "--logged-in"}, want{loggedIn: "a", accounts: "a:1,b:2", page: "plain"}},
		{"logged in as", []string{"--workDir=d", "--accounts=a:1,b:2", "--logged-in=b", "--login-page=org"}, want{loggedIn: "b", accounts: "a:1,b:2", page: "org"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseArgs(tt.give, env, io.Discard)
			if err != nil {
				t.Fatalf("ParseArgs(%q): %v", tt.give, err)
			}
			got := want{http: cfg.HTTPPort, loggedIn: cfg.LoggedIn, accounts: accountsString(cfg), page: cfg.LoginPage}
			if got != tt.want {
				t.Errorf("ParseArgs(%q) = %+v, want %+v", tt.give, got, tt.want)
			}
		})
	}
}

func TestParseArgsErrors(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"unknown flag", []string{"--workDir=d", "--bogus"}, "flag provided but not defined"},
		{"unknown user", []string{"--workDir=d", "--logged-in=zed"}, "not one of --accounts"},
		{"bad protocol", []string{"--workDir=d", "--protocol=acp"}, "want lingma or openai"},
		{"no work dir", []string{"start"}, "--workDir is required"},
		{"bad transport", []string{"--workDir=d", "--transportType=stdio"}, "only websocket"},
		{"bad page", []string{"--workDir=d", "--login-page=fancy"}, "want plain"},
		{"bad fail rate", []string{"--workDir=d", "--fail-rate=2"}, "want 0..1"},
		{"bad accounts", []string{"--workDir=d", "--accounts=nopass"}, "not user:password"},
		{"stray arg", []string{"start", "--workDir=d", "now"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseArgs(tt.give, func(string) string { return "" }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseArgs(%q) error = %v, want one containing %q", tt.give, err, tt.want)
			}
		})
	}
}

func accountsString(cfg Config) string {
	var parts []string
	for _, u := range []string{"a", "b", "env", "demo"} {
		if p, ok := cfg.Accounts[u]; ok {
			parts = append(parts, u+":"+p)
		}
	}
	return strings.Join(parts, ",")
}

func TestParsePrompt(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"bare", "just text\nmore", "user:just text\nmore"},
		{"sections", "<<<system>>>\nS\n<<<user>>>\nU\n\n<<<tool_result id=c1 name=f>>>\nR", "system:S|user:U|tool_result[c1 f]:R"},
		{"preamble", "hello\n<<<user>>>\nU", "user:hello|user:U"},
		{"escape", "<<<user>>>\n <<<x>>>\n  <<<y>>>", "user:<<<x>>>\n  <<<y>>>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var parts []string
			for _, s := range parsePrompt(tt.give) {
				tag := s.role
				if s.attrs != nil {
					tag += "[" + s.attrs["id"] + " " + s.attrs["name"] + "]"
				}
				parts = append(parts, tag+":"+s.body)
			}
			if got := strings.Join(parts, "|"); got != tt.want {
				t.Errorf("parsePrompt = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseDirectives(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
	}{
		{"none", "plain", "chunks=-1 errAfter=-1 delay=-1ns retry=1s unknown=0"},
		{"values", "[[sim:chunks=3]] [[sim:error-after=2]] [[sim:delay=5ms]] [[sim:ratelimit=3s]]", "chunks=3 errAfter=2 delay=5ms retry=3s unknown=0"},
		{"malformed", "[[sim:chunks=x]] [[sim:nope]] [[SIM:error]]", "chunks=-1 errAfter=-1 delay=-1ns retry=1s unknown=2"},
		{"bounded", "[[sim:chunks=99999999]]", "chunks=10000 errAfter=-1 delay=-1ns retry=1s unknown=0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := parseDirectives(tt.give)
			got := fmt.Sprintf("chunks=%d errAfter=%d delay=%v retry=%v unknown=%d", d.chunks, d.errAfter, d.delay, d.retryAfter, len(d.unknown))
			if got != tt.want {
				t.Errorf("parseDirectives = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSplitChunks(t *testing.T) {
	tests := []struct {
		name string
		give string
		n    int
		want string
	}{
		{"per word", " a  b\nc ", -1, " a  |b\n|c "},
		{"fewer", "a b c d e", 2, "a b c |d e"},
		{"pad", "a", 3, "a |lorem |ipsum"},
		{"zero", "a b", 0, ""},
		{"empty per word", "", -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks, full := splitChunks(tt.give, tt.n)
			if got := strings.Join(chunks, "|"); got != tt.want || strings.Join(chunks, "") != full {
				t.Errorf("splitChunks = %q (full %q), want %q", got, full, tt.want)
			}
		})
	}
}
