package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session/bundle"
)

// kinds are the kinds of worker the daemon runs (pool/drivers' table): the
// driver setting (the top-level one, or an account's own) picks one by
// name, and everything the daemon knows of a driver (its configuration
// section, credential layout, agent model names, login recipe, how the
// simulator plays it) comes from its entry.
var kinds = drivers.Kinds()

// kindNames lists the kinds' names for an error: "a, b or c".
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// kindOf returns the kind an account runs as: its own driver setting,
// else the top-level one.
func kindOf(cfg config.Config, acct config.Account) (worker.Kind, error) {
	name := acct.Driver
	if name == "" {
		name = cfg.Driver
	}
	k, ok := worker.ByName(kinds, name)
	if !ok {
		if acct.Driver == "" {
			return worker.Kind{}, fmt.Errorf("driver %q: use %s", name, kindNames())
		}
		return worker.Kind{}, fmt.Errorf("account %s: driver %q: use %s", acct.Name, name, kindNames())
	}
	return k, nil
}

// agentModels are every kind's agent model names, by kind (the router
// routes such a name to its kind in a pool of several kinds).
func agentModels() map[string][]string {
	out := map[string][]string{}
	for _, k := range kinds {
		if len(k.AgentModels) > 0 {
			out[k.Name] = k.AgentModels
		}
	}
	return out
}

// specOf is the credential layout of the named kind's workers, which
// session bundles carry (the zero Spec for a kind not in the table).
func specOf(kind string) bundle.Spec {
	k, _ := worker.ByName(kinds, kind)
	return bundle.Spec(k.Credentials)
}

// workerDrivers makes the drivers the accounts run with, one per kind and
// binary, and keeps them: a reload that keeps an account's kind and binary
// gives its worker the same driver, so the supervisor sees no change and
// leaves the worker running. The drivers' settings are those at start (a
// section's change takes a restart).
type workerDrivers struct {
	cfg config.Config
	log *slog.Logger

	mu   sync.Mutex
	made map[driverKey]worker.Driver
}

// driverKey names one driver: a kind, its binary ("" = the bundled
// simulator) and arguments (joined by NULs), and whether it serves the
// demo pool (no accounts configured).
type driverKey struct {
	kind, bin, args string
	demo            bool
}

func newWorkerDrivers(cfg config.Config, log *slog.Logger) *workerDrivers {
	return &workerDrivers{cfg: cfg, log: log, made: map[driverKey]worker.Driver{}}
}

// driver returns the driver of kind's workers started with bin and args
// (the worker_args it follows with), made on first use. A binary that is
// not there is refused: every worker would be restarted forever while the
// daemon looks alive.
func (d *workerDrivers) driver(kind worker.Kind, bin string, args []string, demo bool) (worker.Driver, error) {
	key := driverKey{kind: kind.Name, bin: bin, args: strings.Join(args, "\x00"), demo: demo}
	d.mu.Lock()
	defer d.mu.Unlock()
	if drv, ok := d.made[key]; ok {
		return drv, nil
	}
	cfg := d.cfg
	// prefix starts the worker binary; extra follows the driver's own
	// arguments.
	prefix, extra := []string{bin}, args
	if bin != "" {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("worker_bin %q cannot be run (%w): set POOLGATE_WORKER_BIN (or the account's worker_bin) to the worker binary's path, executable by this user", bin, err)
		}
	} else {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable for the simulated workers: %w", err)
		}
		prefix = append([]string{self, "simworker"}, kind.SimArgs...)
		if demo {
			extra = append(extra[:len(extra):len(extra)], kind.DemoArgs...)
		}
		if cfg.SimDirectives {
			extra = append(extra[:len(extra):len(extra)], "--directives")
		}
	}
	drv, err := kind.New(worker.Setup{Command: prefix, ExtraArgs: extra, APIKey: cfg.WorkerAPIKey,
		MaxInFlight: cfg.InstanceMaxInFlight, MaxTurnBytes: cfg.WorkerMaxTurnBytes, Debug: cfg.RequestLogDebug,
		Section: cfg.Section(kind.Name), Logger: d.log.With("component", kind.Name)})
	if err != nil {
		return nil, fmt.Errorf("driver %s: %w", kind.Name, err)
	}
	d.made[key] = drv
	return drv, nil
}
