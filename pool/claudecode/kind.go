// Package claudecode is the claude-code kind of worker: Claude Code (the
// `claude` binary of @anthropic-ai/claude-code) run as one long-lived
// stream-json process per account, through the kind-neutral driver of
// pool/agentcli. This package is the kind's profile (its arguments,
// environment, credentials, login and status commands, error codes and
// dialect points), its settings section and its registration; what was
// seen of the binary, and what each point rests on, is in
// docs/claude-code-worker.md.
package claudecode

import (
	"fmt"
	"regexp"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// name is the kind's name, the driver setting's value.
const name = "claude-code"

// Kind registers the claude-code kind: its credential layout (the login
// `claude auth login` stores, config/.credentials.json; a token or key
// from the account's secret or env is never a file), its simulator mode
// and its settings section.
var Kind = worker.Kind{
	Name:        name,
	Credentials: worker.Credentials{Dir: "config", Required: []string{credentialsFile}},
	SimArgs:     []string{"agent-cli", "claude-code"},
	DemoSecret:  "sk-ant-api03-simulated", // an API key to the simulator
	Section:     func() any { s := DefaultSettings(); return &s },
	New:         newFromSetup,
}

// Settings is the kind's section of the configuration (the yaml key
// claude-code:, environment variables POOLGATE_CLAUDE_CODE_<KEY>). Each
// field's trailing comment is its documentation; its default is in
// DefaultSettings.
type Settings struct {
	SystemPrompt string        `yaml:"system_prompt"` // the system prompt Claude Code's own is replaced with ("" keeps Claude Code's agent prompt) (a short prompt about the gateway's transcript format)
	Secret       string        `yaml:"secret"`        // what an account's password is: auto (sk-ant-oat... an OAuth token, anything else an API key), oauth_token, api_key, or login (the password the login recipe types, no credential of its own) (auto)
	LiveSessions int           `yaml:"live_sessions"` // Claude Code processes an account keeps running, each holding one conversation's session (2)
	TurnTimeout  time.Duration `yaml:"turn_timeout"`  // a whole turn (30m)
	IdleTimeout  time.Duration `yaml:"idle_timeout"`  // longest silence from the process within a turn: a hung worker (2m)
	Record       bool          `yaml:"record"`        // write every line to and from every worker's processes to a transcript (false)
	RecordDir    string        `yaml:"record_dir"`    // where transcripts go, a sub-directory per instance ("" = each work dir's transcripts/)
}

// Secret kinds.
const (
	SecretAuto       = "auto"
	SecretOAuthToken = "oauth_token"
	SecretAPIKey     = "api_key"
	SecretLogin      = "login"
)

// DefaultSystemPrompt is the system prompt the workers get: Claude Code's
// own describes an agent with tools this worker does not have; the
// gateway's says how its user messages are laid out.
const DefaultSystemPrompt = "You are the model behind an API gateway, answering one conversation at a time. " +
	"Each user message is either a plain question or a transcript laid out in sections, each opened by a marker " +
	"line such as <<<system>>>, <<<user>>>, <<<assistant>>>, <<<tools>>>, <<<contract>>>, <<<tool_call ...>>> or " +
	"<<<tool_result ...>>>. Answer the newest turn as the assistant of that transcript would: follow its system " +
	"sections and, when tools are offered, the contract section's rules for calling them. You have no tools of " +
	"your own and must never invent a tool's result. Reply with the answer only, without comments on the layout."

// DefaultSettings are the section's defaults.
func DefaultSettings() Settings {
	return Settings{SystemPrompt: DefaultSystemPrompt, Secret: SecretAuto, LiveSessions: 2,
		TurnTimeout: 30 * time.Minute, IdleTimeout: 2 * time.Minute}
}

// Validate returns one error per bad setting, each naming its key as the
// configuration spells it.
func (s Settings) Validate() []error {
	var errs []error
	switch s.Secret {
	case SecretAuto, SecretOAuthToken, SecretAPIKey, SecretLogin:
	default:
		errs = append(errs, fmt.Errorf("claude-code.secret %q: use auto, oauth_token, api_key or login", s.Secret))
	}
	if s.LiveSessions < 1 {
		errs = append(errs, fmt.Errorf("claude-code.live_sessions %d: at least 1", s.LiveSessions))
	}
	for k, d := range map[string]time.Duration{"turn_timeout": s.TurnTimeout, "idle_timeout": s.IdleTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("claude-code.%s must be positive, got %s", k, d))
		}
	}
	return errs
}

// newFromSetup is Kind.New: the agentcli driver with this kind's profile.
func newFromSetup(s worker.Setup) (worker.Driver, error) {
	set, ok := s.Section.(Settings)
	if !ok {
		return nil, fmt.Errorf("claude-code: configuration section is %T, not claudecode.Settings", s.Section)
	}
	if errs := set.Validate(); len(errs) > 0 {
		return nil, errs[0]
	}
	return agentcli.New(agentcli.Config{Profile: Profile(set.Secret), Command: s.Command, ExtraArgs: s.ExtraArgs,
		SystemPrompt: set.SystemPrompt, LiveSessions: set.LiveSessions, TurnTimeout: set.TurnTimeout,
		IdleTimeout: set.IdleTimeout, MaxTurnBytes: s.MaxTurnBytes, Record: set.Record, RecordDir: set.RecordDir,
		Logger: s.Logger}), nil
}

// urlRE finds the URL `claude auth login` prints.
var urlRE = regexp.MustCompile(`https?://[^\s"'<>]+`)
