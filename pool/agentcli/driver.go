package agentcli

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/textchat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Config is a driver's configuration. Zero fields take the defaults noted.
type Config struct {
	// Profile is the kind of CLI (required).
	Profile Profile
	// Command is the argv prefix that runs the CLI: its binary, or the
	// bundled simulator with the kind's simulator arguments (required).
	Command []string
	// ExtraArgs follow the profile's arguments (the configured extra
	// worker arguments). Default none.
	ExtraArgs []string
	// SystemPrompt replaces the CLI's own system prompt ("" keeps the
	// CLI's). Default "".
	SystemPrompt string
	// LiveSessions is how many CLI processes, each holding one session,
	// an account keeps running: the supervised one and the ones the
	// driver spawned for other conversations. A follow-up of a session no
	// process holds starts one with --resume; the least recently used
	// idle one beyond the cap is stopped. Default 2.
	LiveSessions int
	// StartTimeout bounds a spawned process's start to its initialize
	// answer, and a status or login command. Default 20s.
	StartTimeout time.Duration
	// CallTimeout bounds a control request (initialize, set_model, the
	// health probe) and a session reset. Default 10s.
	CallTimeout time.Duration
	// TurnTimeout bounds a whole turn. Default 30 minutes.
	TurnTimeout time.Duration
	// IdleTimeout is the longest silence within a turn (no line from the
	// CLI): a hung worker. Default 2 minutes.
	IdleTimeout time.Duration
	// StopTimeout is how long an interrupted turn may take to end before
	// its process is counted as stuck. Default 5s.
	StopTimeout time.Duration
	// MaxTurnBytes is the largest user message sent, as encoded. Default
	// 16 MiB.
	MaxTurnBytes int64
	// Record writes every line in and out of every worker to a transcript
	// under RecordDir (a sub-directory per instance; "" : each work dir's
	// transcripts/). Default off.
	Record    bool
	RecordDir string
	// Logger receives the driver's warnings. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	worker.Default(&c.LiveSessions, 2)
	worker.Default(&c.StartTimeout, 20*time.Second)
	worker.Default(&c.CallTimeout, 10*time.Second)
	worker.Default(&c.TurnTimeout, 30*time.Minute)
	worker.Default(&c.IdleTimeout, 2*time.Minute)
	worker.Default(&c.StopTimeout, 5*time.Second)
	worker.Default(&c.MaxTurnBytes, 16<<20)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Profile.Vocabulary.Types == nil {
		c.Profile.Vocabulary = StdoutVocabulary()
	}
}

// Driver starts agent CLIs of one kind and connects to them.
type Driver struct {
	cfg   Config
	stats Stats
}

var (
	_ worker.Driver      = (*Driver)(nil)
	_ worker.Transporter = (*Driver)(nil)
	_ worker.Preparer    = (*Driver)(nil)
	_ worker.TurnChecker = (*Driver)(nil)
)

// New returns a driver with cfg's defaults filled.
func New(cfg Config) *Driver {
	cfg.setDefaults()
	return &Driver{cfg: cfg}
}

// Stats are the counts of the lines every worker of the driver printed.
func (d *Driver) Stats() *Stats { return &d.stats }

// Transport: an agent CLI speaks on its standard input and output.
func (d *Driver) Transport() worker.Transport { return worker.TransportStdio }

// Command is the supervised process's argv: a new session, the gateway's
// system prompt.
func (d *Driver) Command(ep worker.Endpoint) []string {
	return d.argv(Launch{SystemPrompt: d.cfg.SystemPrompt})
}

func (d *Driver) argv(l Launch) []string {
	argv := append([]string(nil), d.cfg.Command...)
	argv = append(argv, d.cfg.Profile.Args(l)...)
	return append(argv, d.cfg.ExtraArgs...)
}

// dirs are ep's directories.
func dirs(ep worker.Endpoint) (Dirs, error) {
	wd, err := filepath.Abs(ep.WorkDir)
	if err != nil {
		return Dirs{}, err
	}
	return Dirs{WorkDir: wd, Home: filepath.Join(wd, "home"), Tmp: filepath.Join(wd, "tmp"),
		Config: filepath.Join(wd, "config")}, nil
}

// Prepare makes the worker's home, temp and config dirs under its work
// dir, and returns the profile's environment for them.
func (d *Driver) Prepare(ep worker.Endpoint) ([]string, error) {
	ds, err := dirs(ep)
	if err != nil {
		return nil, fmt.Errorf("%s %s: work dir: %w", d.cfg.Profile.Name, ep.Name, err)
	}
	for _, p := range []string{ds.Home, ds.Tmp, ds.Config} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("%s %s: %w", d.cfg.Profile.Name, ep.Name, err)
		}
	}
	return d.cfg.Profile.Env(ds, ep.Account)
}

// Connect takes the started CLI's pipes, asks it to initialize, and asks
// its login state; it returns once both are answered, or when ctx ends.
func (d *Driver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	if ep.Stdio == nil || ep.Spawn == nil {
		return nil, fmt.Errorf("%s %s: the worker was started without its pipes", d.cfg.Profile.Name, ep.Name)
	}
	ds, err := dirs(ep)
	if err != nil {
		return nil, err
	}
	b := newBackend(d, ep, ds)
	main := b.newConn(*ep.Stdio, nil, "main")
	init, err := main.initialize(ctx)
	if err != nil {
		main.close()
		b.rec.close()
		return nil, fmt.Errorf("%s %s: %w", d.cfg.Profile.Name, ep.Name, err)
	}
	b.adopt(main, init)
	if err := b.refreshLogin(ctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%s %s: login state: %w", d.cfg.Profile.Name, ep.Name, err)
	}
	return b, nil
}

// CheckTurn refuses a turn whose user message would be larger than
// MaxTurnBytes.
func (d *Driver) CheckTurn(t *chat.Turn) error {
	if n := int64(textchat.JSONBound(t, false)); n > d.cfg.MaxTurnBytes {
		return &chat.TooLargeError{Size: n, Limit: d.cfg.MaxTurnBytes}
	}
	return nil
}
