package claudecode

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

func TestArgs(t *testing.T) {
	got := strings.Join(args(agentcli.Launch{SystemPrompt: "be brief", Resume: "s-1", Model: "opus"}), " ")
	want := "-p --input-format stream-json --output-format stream-json --verbose --include-partial-messages --tools  " +
		"--permission-prompts none --strict-mcp-config --system-prompt be brief --model opus --resume s-1"
	if got != want {
		t.Errorf("args\n got %s\nwant %s", got, want)
	}
	if a := args(agentcli.Launch{}); slices.Contains(a, "--resume") || slices.Contains(a, "--system-prompt") {
		t.Errorf("a new session with the CLI's own prompt: %q", a)
	}
}

// The account's secret reaches Claude Code as the credential it is, and
// only then.
func TestEnvSecret(t *testing.T) {
	d := agentcli.Dirs{Home: "/w/home", Tmp: "/w/tmp", Config: "/w/config"}
	tests := []struct {
		secret, give, want string // want: the credential entry, "" for none
	}{
		{SecretAuto, "sk-ant-oat01-abc", "CLAUDE_CODE_OAUTH_TOKEN=sk-ant-oat01-abc"},
		{SecretAuto, "sk-ant-api03-abc", "ANTHROPIC_API_KEY=sk-ant-api03-abc"},
		{SecretAuto, "", ""},
		{SecretOAuthToken, "tok", "CLAUDE_CODE_OAUTH_TOKEN=tok"},
		{SecretAPIKey, "sk-ant-oat01-abc", "ANTHROPIC_API_KEY=sk-ant-oat01-abc"},
		{SecretLogin, "page-password", ""},
	}
	for _, tt := range tests {
		e := env(d, worker.Account{Password: tt.give}, tt.secret)
		var cred string
		for _, kv := range e {
			if strings.HasPrefix(kv, "ANTHROPIC_API_KEY=") || strings.HasPrefix(kv, "CLAUDE_CODE_OAUTH_TOKEN=") {
				cred = kv
			}
		}
		if cred != tt.want {
			t.Errorf("secret %s, password %q: credential %q, want %q", tt.secret, tt.give, cred, tt.want)
		}
		for _, must := range []string{"HOME=/w/home", "TMPDIR=/w/tmp", "CLAUDE_CONFIG_DIR=/w/config", "DISABLE_TELEMETRY=1",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_FILE_MENTIONS=1"} {
			if !slices.Contains(e, must) {
				t.Errorf("env %q lacks %s", e, must)
			}
		}
	}
}

// The status JSON as the real binary prints it (docs/claude-code-worker.md).
func TestParseStatus(t *testing.T) {
	tests := []struct {
		give string
		want worker.AuthState
		err  bool
	}{
		{give: `{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}`},
		{give: `{"loggedIn": true, "authMethod": "api_key", "apiKeySource": "ANTHROPIC_API_KEY"}`,
			want: worker.AuthState{LoggedIn: true, Account: "api_key"}},
		{give: `{"loggedIn": true, "authMethod": "claude.ai", "email": "me@example.com"}`,
			want: worker.AuthState{LoggedIn: true, Account: "me@example.com"}},
		{give: `Not logged in. Run claude auth login to authenticate.`, err: true},
		{give: `{"authMethod": "none"}`, err: true},
	}
	for _, tt := range tests {
		got, err := parseStatus([]byte(tt.give))
		if got != tt.want || (err != nil) != tt.err {
			t.Errorf("parseStatus(%s) = %+v, %v; want %+v, error %v", tt.give, got, err, tt.want, tt.err)
		}
	}
}

func TestEscape(t *testing.T) {
	for give, want := range map[string]string{"/clear": " /clear", "/tmp/x: what?": " /tmp/x: what?", "hello /x": "hello /x",
		"<<<system>>>\n/x": "<<<system>>>\n/x", "": ""} {
		if got := escape(give); got != want {
			t.Errorf("escape(%q) = %q, want %q", give, got, want)
		}
	}
}

func TestModels(t *testing.T) {
	models := Profile(SecretAuto).Models
	init := json.RawMessage(`{"models":[{"value":"default","displayName":"Default (recommended)"},{"value":"opus","displayName":"Opus"},{"displayName":"nameless"}]}`)
	got := models(init)
	want := []chat.Model{{ID: "default", Name: "Default (recommended)"}, {ID: "opus", Name: "Opus"}}
	if !slices.Equal(got, want) {
		t.Errorf("models = %+v, want %+v", got, want)
	}
	if models(json.RawMessage(`nonsense`)) != nil {
		t.Error("models of a broken answer")
	}
}

func TestSettings(t *testing.T) {
	if errs := DefaultSettings().Validate(); len(errs) > 0 {
		t.Errorf("the defaults are invalid: %v", errs)
	}
	bad := Settings{Secret: "maybe", LiveSessions: 0}
	if errs := bad.Validate(); len(errs) != 4 {
		t.Errorf("bad settings: %v, want 4 errors (secret, live_sessions, two timeouts)", errs)
	}
	if _, err := newFromSetup(worker.Setup{Section: DefaultSettings(), Command: []string{"claude"}}); err != nil {
		t.Error(err)
	}
	if _, err := newFromSetup(worker.Setup{Section: bad}); err == nil {
		t.Error("a driver from bad settings")
	}
}
