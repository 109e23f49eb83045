package agentcli

import (
	"encoding/json"
	"regexp"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Profile is what one kind of agent CLI fills in: how to start it, where
// it keeps its state and credentials, how to ask it whether it is logged
// in and how to log it in, and the points where its dialect of the
// stream-json protocol differs. Everything else (the pipes, turns,
// sessions, errors, health) is the package's.
type Profile struct {
	// Name is the kind's name, for logs and errors ("claude-code").
	Name string
	// Args are the arguments after the CLI's command that start one
	// long-lived process reading user messages as stream-json on its
	// standard input and printing stream-json (with partial messages,
	// when the CLI has them) on its standard output, with no built-in
	// tools and no permission prompts.
	Args func(l Launch) []string
	// Env is the CLI's environment for a worker whose directories are d
	// (its config dir under it, telemetry and updates off, the account's
	// secret as the CLI's credential variable): entries over the
	// supervisor's base environment, under the account's own env.
	Env func(d Dirs, acct worker.Account) ([]string, error)
	// StatusArgs print the CLI's login state (after its command), which
	// ParseStatus reads from what it printed on its standard output; the
	// exit status is not read, as a CLI may exit non-zero when logged
	// out. The state is asked at each start, and again while the account
	// is logged out.
	StatusArgs  []string
	ParseStatus func(out []byte) (worker.AuthState, error)
	// CredentialFiles are the files, under the config dir, of the login
	// the CLI stores (its own login command writes them): a change in
	// them is a new login even where the status command says the same.
	CredentialFiles []string
	// LoginArgs start the CLI's own browser or device login (after its
	// command), which prints a URL matching LoginURL on its standard
	// output and waits for the browser; nil when the kind has none.
	LoginArgs []string
	LoginURL  *regexp.Regexp
	// Errors maps the error codes of an assistant message (its "error"
	// field) to what they mean to the pool; a code not in it is an
	// upstream error.
	Errors map[string]ErrorKind
	// LoginText and RateLimitText match a failed turn's text when its
	// code says nothing (nil: not used).
	LoginText, RateLimitText *regexp.Regexp
	// Probe is the control request the health check sends to the
	// supervised process (any answer, a refusal too, shows it alive); ""
	// sends none, and a process whose output is still open counts as
	// alive.
	Probe string
	// Escape makes a prompt safe to send as a user message: the CLI must
	// read it as text, never as one of its own commands. Nil sends it as
	// it is.
	Escape func(prompt string) string
	// Models reads the models the CLI offers from its initialize
	// response (nil: none listed).
	Models func(init json.RawMessage) []chat.Model
	// Vocabulary is what the CLI prints (default StdoutVocabulary()).
	Vocabulary Vocabulary
	// SessionGlob is the pattern, under the config dir, of the files that
	// hold the session id's transcript, removed when nobody continues it
	// (("" : none removed).
	SessionGlob func(id string) string
}

// InitModels reads the models an initialize answer lists, each one's
// value (its id) and display name: a Profile's Models for a CLI that
// lists them as Claude Code does (nil when the answer is not JSON).
func InitModels(init json.RawMessage) []chat.Model {
	var r struct {
		Models []struct {
			Value       string `json:"value"`
			DisplayName string `json:"displayName"`
		} `json:"models"`
	}
	if json.Unmarshal(init, &r) != nil {
		return nil
	}
	out := make([]chat.Model, 0, len(r.Models))
	for _, m := range r.Models {
		if m.Value != "" {
			out = append(out, chat.Model{ID: m.Value, Name: m.DisplayName})
		}
	}
	return out
}

// Launch is what one CLI process is started for.
type Launch struct {
	// SystemPrompt replaces the CLI's own ("" keeps it).
	SystemPrompt string
	// Resume is the session the process continues ("" starts a new one).
	Resume string
	// Model is the model it starts with ("" the CLI's default).
	Model string
}

// Flags are l's arguments as Claude Code and qodercli both spell them:
// --system-prompt, --model and --resume, each one that is set.
func (l Launch) Flags() []string {
	var a []string
	for _, f := range [...][2]string{{"--system-prompt", l.SystemPrompt}, {"--model", l.Model}, {"--resume", l.Resume}} {
		if f[1] != "" {
			a = append(a, f[0], f[1])
		}
	}
	return a
}

// Dirs are a worker's directories, all under its work dir: HOME and
// TMPDIR, and the CLI's config dir (where it keeps its login, settings
// and sessions).
type Dirs struct {
	WorkDir, Home, Tmp, Config string
}

// ErrorKind is what a failed turn means to the pool.
type ErrorKind uint8

// Error kinds.
const (
	// ErrorUpstream: any other failure, answered as an upstream error.
	ErrorUpstream ErrorKind = iota
	// ErrorLogin: the account's login is missing or refused; it needs a
	// login before it serves again.
	ErrorLogin
	// ErrorRateLimit: the account is throttled or out of quota; it cools
	// down.
	ErrorRateLimit
)
