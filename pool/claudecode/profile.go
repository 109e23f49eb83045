package claudecode

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// credentialsFile is where `claude auth login` keeps its login, in the
// config dir (CLAUDE_CONFIG_DIR).
const credentialsFile = ".credentials.json"

// Profile is Claude Code's: secret says what an account's password is
// (SecretAuto, SecretOAuthToken, SecretAPIKey or SecretLogin).
func Profile(secret string) agentcli.Profile {
	return agentcli.Profile{
		Name:            name,
		Args:            args,
		Env:             func(d agentcli.Dirs, a worker.Account) ([]string, error) { return env(d, a, secret), nil },
		StatusArgs:      []string{"auth", "status", "--json"},
		ParseStatus:     parseStatus,
		CredentialFiles: []string{credentialsFile},
		LoginArgs:       []string{"auth", "login"},
		LoginURL:        urlRE,
		Errors: map[string]agentcli.ErrorKind{
			"authentication_failed": agentcli.ErrorLogin, "oauth_org_not_allowed": agentcli.ErrorLogin,
			"cloud_credential_error": agentcli.ErrorLogin, "verification_required": agentcli.ErrorLogin,
			"rate_limit": agentcli.ErrorRateLimit, "billing_error": agentcli.ErrorRateLimit,
		},
		LoginText:     regexp.MustCompile(`Not logged in|Please run /login|Invalid API key|OAuth token (has )?expired`),
		RateLimitText: regexp.MustCompile(`(?i)\brate.?limit|usage limit|\(429\)|quota`),
		Escape:        escape,
		Probe:         "get_binary_version",
		Models:        agentcli.InitModels,
		Vocabulary:    agentcli.StdoutVocabulary(),
		SessionGlob:   func(id string) string { return "projects/*/" + id + ".jsonl" },
	}
}

// args start one stream-json session: partial messages on, no built-in
// tools, nobody asked for permissions, no MCP servers but the ones given
// (none).
func args(l agentcli.Launch) []string {
	a := []string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--include-partial-messages", "--tools", "", "--permission-prompts", "none", "--strict-mcp-config"}
	return append(a, l.Flags()...)
}

// env is the worker's environment: its home, temp and config dirs;
// telemetry, error reports, updates and every request but the model's off;
// no retries of its own (the pool retries and cools down); no @file
// mentions (a caller's "@/etc/passwd" would otherwise be read into the
// prompt); and the account's secret, when it has one, as the credential
// variable it is.
func env(d agentcli.Dirs, a worker.Account, secret string) []string {
	e := []string{"HOME=" + d.Home, "TMPDIR=" + d.Tmp, "CLAUDE_CONFIG_DIR=" + d.Config,
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1", "DISABLE_BUG_COMMAND=1", "CLAUDE_CODE_MAX_RETRIES=0",
		"CLAUDE_CODE_DISABLE_FILE_MENTIONS=1"}
	if a.Password == "" || secret == SecretLogin {
		return e
	}
	v := "ANTHROPIC_API_KEY="
	if secret == SecretOAuthToken || secret == SecretAuto && strings.HasPrefix(a.Password, "sk-ant-oat") {
		v = "CLAUDE_CODE_OAUTH_TOKEN="
	}
	return append(e, v+a.Password)
}

// parseStatus reads `claude auth status --json`.
func parseStatus(out []byte) (worker.AuthState, error) {
	var st struct {
		LoggedIn   *bool  `json:"loggedIn"`
		AuthMethod string `json:"authMethod"`
		Email      string `json:"email"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.LoggedIn == nil {
		return worker.AuthState{}, fmt.Errorf("claude auth status printed %q, not its JSON", agentcli.Clip(string(out)))
	}
	acct := st.Email
	if acct == "" && *st.LoggedIn {
		acct = st.AuthMethod
	}
	return worker.AuthState{LoggedIn: *st.LoggedIn, Account: acct}, nil
}

// escape keeps a prompt from being read as a slash command: Claude Code
// runs a user message that opens with "/" as one (/clear, /login,
// /cost) and reads the rest as its arguments; one space before it makes it
// text.
func escape(p string) string {
	if strings.HasPrefix(p, "/") {
		return " " + p
	}
	return p
}
