// Package qoder is the qoder kind of worker: Qoder CLI (the qodercli
// binary of @qoder-ai/qodercli) run as one long-lived stream-json process
// per account through the kind-neutral driver of pool/agentcli. Beside the
// kind's profile (its arguments, environment, error codes, vocabulary and
// the escaping of prompts), its settings and its registration, it keeps
// the account's login, which qodercli shows in its own way: a session that
// is not logged in answers a turn it was never asked with "Not logged in",
// reads nothing more and exits seconds later. So the driver watches a
// session's first lines (driver.go, tap.go), and an account with nothing
// to log in with runs the CLI's device login, `qodercli login`, as its
// process instead: its URL is the account's login URL, and once the login
// is stored the command exits and the next start runs the session
// (backend.go, login.go). A personal access token the CLI cannot use fails
// the start with the CLI's reason (runlog.go). What was seen of the
// binary, and what each point rests on, is in docs/qoder-worker.md.
package qoder

import (
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// name is the kind's name, the driver setting's value.
const name = "qoder"

// Kind registers the qoder kind: its credential layout (config/.auth/user
// and the machine_id its key is made from; a personal access token from
// the account's secret is never a file), its login recipe for the
// vendor's device page, its simulator mode and its settings section.
var Kind = worker.Kind{
	Name:        name,
	Credentials: worker.Credentials{Dir: credDir, Required: []string{credFile, machineIDFile}, MachineIDFile: machineIDFile},
	LoginRecipe: "qoder-device",
	SimArgs:     []string{"agent-cli", "qoder"},
	DemoSecret:  patPrefix + "simulated", // a personal access token the simulator exchanges
	Section:     func() any { s := DefaultSettings(); return &s },
	New:         newFromSetup,
}

// Settings is the kind's section of the configuration (the yaml key
// qoder:, environment variables POOLGATE_QODER_<KEY>). Each field's
// trailing comment is its documentation; its default is in
// DefaultSettings.
type Settings struct {
	SystemPrompt string        `yaml:"system_prompt"` // the system prompt qodercli's own is replaced with ("" keeps qodercli's coding-agent prompt) (a short prompt about the gateway's transcript format)
	Secret       string        `yaml:"secret"`        // what an account's password is: auto (qoder_... a personal access token, anything else the device login page's password), token, or login (token: the CLI exchanges it at each start; login: the password the login recipe types) (auto)
	Model        string        `yaml:"model"`         // the model a turn that names none runs on ("" = qodercli's own choice, auto)
	ModelRetries int           `yaml:"model_retries"` // times qodercli retries a failed model request itself before the turn fails (0: the pool retries on another account)
	DeviceReport bool          `yaml:"device_report"` // let qodercli report its device fingerprint (umid) to the vendor (false)
	LiveSessions int           `yaml:"live_sessions"` // qodercli processes an account keeps running, each holding one conversation's session (2)
	TurnTimeout  time.Duration `yaml:"turn_timeout"`  // a whole turn (30m)
	IdleTimeout  time.Duration `yaml:"idle_timeout"`  // longest silence from the process within a turn: a hung worker (2m)
	Record       bool          `yaml:"record"`        // write every line to and from every worker's processes to a transcript (false)
	RecordDir    string        `yaml:"record_dir"`    // where transcripts go, a sub-directory per instance ("" = each work dir's transcripts/)
}

// Secret kinds: what an account's password is.
const (
	SecretAuto  = "auto"
	SecretToken = "token"
	SecretLogin = "login"
)

// patPrefix starts a personal access token (the vendor's SDK guide
// spells its example so; a guess that SecretToken overrides).
const patPrefix = "qoder_"

// isToken reports whether an account's password is a personal access
// token under the secret setting.
func (s Settings) isToken(password string) bool {
	switch s.Secret {
	case SecretToken:
		return password != ""
	case SecretLogin:
		return false
	}
	return strings.HasPrefix(password, patPrefix)
}

// DefaultSystemPrompt is the system prompt the workers get. qodercli's
// own describes a coding agent with tools this worker does not have; the
// gateway's says how its user messages are laid out.
const DefaultSystemPrompt = "You answer one conversation at a time for an API gateway. A user message is either a " +
	"plain question or a transcript in sections, each opened by a marker line such as <<<system>>>, <<<user>>>, " +
	"<<<assistant>>>, <<<tools>>>, <<<contract>>>, <<<tool_call ...>>> or <<<tool_result ...>>>. Reply as the " +
	"assistant of that transcript would to its newest turn: follow its system sections and, when tools are " +
	"offered, the contract section's rules for calling them. You have no tools of your own; never invent a " +
	"tool's result. Give the reply alone, with no remarks on the layout."

// DefaultSettings are the section's defaults.
func DefaultSettings() Settings {
	return Settings{SystemPrompt: DefaultSystemPrompt, Secret: SecretAuto, LiveSessions: 2, TurnTimeout: 30 * time.Minute,
		IdleTimeout: 2 * time.Minute}
}

// Validate returns one error per bad setting, each naming its key as the
// configuration spells it.
func (s Settings) Validate() []error {
	var errs []error
	switch s.Secret {
	case SecretAuto, SecretToken, SecretLogin:
	default:
		errs = append(errs, fmt.Errorf("qoder.secret %q: use auto, token or login", s.Secret))
	}
	if s.ModelRetries < 0 || s.ModelRetries > 20 {
		errs = append(errs, fmt.Errorf("qoder.model_retries %d: from 0 to 20", s.ModelRetries))
	}
	if s.LiveSessions < 1 {
		errs = append(errs, fmt.Errorf("qoder.live_sessions %d: at least 1", s.LiveSessions))
	}
	if s.TurnTimeout <= 0 {
		errs = append(errs, fmt.Errorf("qoder.turn_timeout must be positive, got %s", s.TurnTimeout))
	}
	if s.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("qoder.idle_timeout must be positive, got %s", s.IdleTimeout))
	}
	return errs
}

// newFromSetup is Kind.New.
func newFromSetup(s worker.Setup) (worker.Driver, error) {
	set, ok := s.Section.(Settings)
	if !ok {
		return nil, fmt.Errorf("qoder: configuration section is %T, not qoder.Settings", s.Section)
	}
	if errs := set.Validate(); len(errs) > 0 {
		return nil, errs[0]
	}
	return New(set, agentcli.Config{Command: s.Command, ExtraArgs: s.ExtraArgs, MaxTurnBytes: s.MaxTurnBytes,
		Logger: s.Logger}), nil
}
