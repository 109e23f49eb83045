package qoder

import (
	"cmp"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// What qodercli 1.1.52 was seen to do, and where each point was learnt, is
// in docs/qoder-worker.md; the comments here say only why the profile is
// as it is.

// The credential layout: qodercli keeps its login in its config dir's
// .auth directory, as user (the account, encrypted with a key made from
// machine_id's text) and machine_id (a random id it makes once per config
// dir). The config dir is agentcli's, config under the work dir.
const (
	credDir       = "config/.auth"
	credFile      = "user"
	machineIDFile = "machine_id"
)

// Profile is qodercli's dialect of the stream-json protocol for agentcli.
// Its login state is the package's (driver.go): agentcli sees only a
// logged-in CLI, so the profile names no status or login command.
func Profile(s Settings) agentcli.Profile {
	return agentcli.Profile{
		Name: name,
		Args: func(l agentcli.Launch) []string { return args(s, l) },
		Env:  func(d agentcli.Dirs, a worker.Account) ([]string, error) { return env(s, d, a), nil },
		Errors: map[string]agentcli.ErrorKind{
			"authentication_failed": agentcli.ErrorLogin,
			"rate_limit":            agentcli.ErrorRateLimit, "billing_error": agentcli.ErrorRateLimit,
		},
		LoginText:     loginText,
		RateLimitText: regexp.MustCompile(`(?i)rate.?limit|too many requests|\(429\)|quota|credits? (are |is )?(exhausted|insufficient|used up)`),
		Escape:        Escape,
		Probe:         "mcp_status",
		Models:        models,
		Vocabulary:    Vocabulary(),
		SessionGlob:   func(id string) string { return "projects/*/" + id + ".jsonl" },
	}
}

// loginText is the text of a turn qodercli refused for want of a login.
var loginText = regexp.MustCompile(`Not logged in|Please run /login`)

// settingsJSON are the settings every worker process runs with: no hooks
// (the bundled security-scan plugin runs a shell hook at each session's
// start), telemetry and update checks off.
const settingsJSON = `{"disableAllHooks":true,"telemetry":{"enabled":false},` +
	`"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false}}`

// args start one stream-json session: partial messages on, no built-in
// tools or skills, no MCP servers, nothing asked and nothing run without
// approval (dont_ask: with no tools there is nothing to approve, and a
// request for one is refused rather than granted), the CLI's own model
// retries as configured (the pool retries on another account).
func args(s Settings, l agentcli.Launch) []string {
	a := []string{"--print", "--input-format", "stream-json", "--output-format", "stream-json",
		"--include-partial-messages", "--tools", "", "--disable-builtin-skills", "--strict-mcp-config",
		"--permission-mode", "dont_ask", "--max-model-request-retries", strconv.Itoa(s.ModelRetries),
		"--settings", settingsJSON}
	l.Model = cmp.Or(l.Model, s.Model)
	return append(a, l.Flags()...)
}

// env is the worker's environment: its home, temp and config dirs (the
// variable, not --config-dir, so that the status and login commands the
// driver spawns use the same dir), token counts in results, no device
// fingerprint report unless asked for, and the account's password as its
// personal access token when it is one (Settings.Secret).
func env(s Settings, d agentcli.Dirs, a worker.Account) []string {
	e := []string{"HOME=" + d.Home, "TMPDIR=" + d.Tmp, "QODER_CONFIG_DIR=" + d.Config, "QODER_EXPOSE_TOKEN_USAGE=1"}
	if !s.DeviceReport {
		e = append(e, "QODER_DISABLE_UMID_REPORT=1")
	}
	if s.isToken(a.Password) {
		e = append(e, patEnv+"="+a.Password)
	}
	return e
}

// patEnv is the variable qodercli reads a personal access token from.
const patEnv = "QODER_PERSONAL_ACCESS_TOKEN"

// models reads the initialize answer's models (value and display name).
// Offline the list was empty; the CLI's own default, auto, is always
// there (its init line names it).
func models(init json.RawMessage) []chat.Model {
	out := agentcli.InitModels(init)
	if !slices.ContainsFunc(out, func(m chat.Model) bool { return m.ID == defaultModel }) {
		out = append(out, chat.Model{ID: defaultModel, Name: "Auto"})
	}
	return out
}

// defaultModel is the model qodercli picks by itself.
const defaultModel = "auto"
