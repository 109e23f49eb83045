package worker

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Kind is one kind of worker as the daemon registers it: everything the
// daemon, the router and the session bundles know of a driver comes from
// its Kind, so a new kind of worker is one package and one entry in the
// table of kinds (pool/drivers); nothing else names it.
type Kind struct {
	// Name is the value of the driver setting that selects this kind.
	Name string
	// Credentials are the files of a work dir that are the worker's login,
	// which session bundles carry; the zero value: the kind keeps no login
	// in its work dir.
	Credentials Credentials
	// AgentModels are model names (lower case) that ask for the worker's
	// agent mode (chat.Turn.Agent); none when the kind has no such mode.
	AgentModels []string
	// LoginRecipe is the default login recipe of a real worker of this
	// kind; "" takes the bundled simulator's recipe.
	LoginRecipe string
	// SimArgs follow the bundled simulator's command to make it speak this
	// kind's protocol; DemoArgs are added for the demo pool (no accounts
	// configured), so that its workers start logged in when the kind has a
	// login.
	SimArgs, DemoArgs []string
	// DemoSecret is the password a simulated account with neither username
	// nor password gets, for a kind whose simulator, like its CLI, logs in
	// by a secret (an API key, a token) rather than by DemoArgs.
	DemoSecret string
	// Section makes the kind's configuration section with its defaults: a
	// pointer to a struct whose fields carry yaml tags (the keys under the
	// kind's name) and trailing comments (their documentation), with an
	// optional Validate() []error; nil when the kind has no settings of
	// its own. Setup.Section is that struct as configured.
	Section func() any
	// New makes the kind's Driver.
	New func(Setup) (Driver, error)
	// Commands are subcommands of the poolgate binary the kind supplies
	// (the name after "poolgate" to its command), such as a check of a
	// real worker binary; none when it has none.
	Commands map[string]Command
}

// Command is a subcommand a Kind supplies. args follow its name; env is
// the environment a worker process started by the command gets (the
// daemon's filtered child environment), getenv looks up the process's own.
type Command func(ctx context.Context, args, env []string, getenv func(string) string, stdout, stderr io.Writer) error

// Credentials name a driver's credential files inside a work dir (the
// layout session/bundle seals).
type Credentials struct {
	// Dir is the credential directory relative to the work dir: one path
	// element, or a few joined by "/" (config/.auth). Required unless the
	// kind keeps no login.
	Dir string
	// Required are file names in Dir that must all exist for the work dir to
	// count as logged in, and that every bundle must carry.
	Required []string
	// MachineIDFile names the file in Dir whose content is the machine id
	// the credentials are bound to; "" when none.
	MachineIDFile string
	// ExpiryFile names a JSON file in Dir with an "expiresAt" field (RFC 3339
	// or Unix seconds/milliseconds); "" when the driver knows no expiry.
	ExpiryFile string
}

// Setup is what a Kind's New gets: the settings every kind shares, and its
// own configuration section.
type Setup struct {
	// Command is the argv prefix that runs the worker (the configured
	// binary, or the bundled simulator with the kind's SimArgs).
	Command []string
	// ExtraArgs are the configured extra worker arguments.
	ExtraArgs []string
	// APIKey is the key the worker's API wants ("" for none).
	APIKey string
	// MaxInFlight is the turns one worker takes at once.
	MaxInFlight int
	// MaxTurnBytes is the largest turn sent to a worker, as encoded for it.
	MaxTurnBytes int64
	// Debug: the request log's debug switch is on, so a driver that
	// writes transcripts may keep prompts in them.
	Debug bool
	// Section is the kind's own configuration section (the value the
	// configuration holds under the kind's name; nil when it has none).
	Section any
	// Logger receives the driver's warnings.
	Logger *slog.Logger
}

// Default sets *v to def when *v is zero or less: how a configuration
// (a driver's, the supervisor's, the stores' and the login's) fills a
// field left unset.
func Default[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// TurnChecker is a Driver that knows the largest turn its workers take;
// the router refuses a larger one before admission.
type TurnChecker interface {
	// CheckTurn returns a *chat.TooLargeError for a turn too large to send.
	CheckTurn(t *chat.Turn) error
}

// ByName returns the kind named name from kinds.
func ByName(kinds []Kind, name string) (Kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}
