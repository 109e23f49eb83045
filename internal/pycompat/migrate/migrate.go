// Package migrate is `poolgate migrate`: it moves a deployment of the
// Python gateway poolgate replaces over to poolgate. It reads the old
// settings (a .env, an accounts file, the environment), makes the poolgate
// configuration that means the same, checks it with the very loading and
// validation the daemon runs, and only then brings each account's login
// over: its old work dir copied (or moved, or linked) to
// data_dir/workers/NAME, or its plain session bundle installed there. It
// keeps a journal in the data dir, so that a second run says what the
// first did and changes nothing that is in place. cmd/poolgate only
// dispatches to Run, giving it the login format of a driver's workers (the
// table of kinds and the session bundles' format sit above this ground-floor
// package, so it owns that port: plainbundle.Format).
package migrate

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
)

const usage = `usage: poolgate migrate -data-dir DIR [-env-file OLD/.env] [-accounts-file FILE]
       [-work-dir OLD_WORK_DIR] [-work-dir-of NAME=DIR ...] [-name NAME] [-move | -link] [-o poolgate.yaml]

Reads the Python gateway's settings (the .env file, the accounts file, then
this process's environment), checks that the poolgate configuration they make
loads as the daemon loads it, then copies each account's old work dir to
DIR/workers/NAME (-move: moves it, so the Python gateway can no longer run on
it; -link: a symbolic link) and installs plain session bundles
(LINGMA_SESSION_BUNDLE, an account's session_bundle) where no credentials
are. It writes the configuration (to -o, mode 0600, or stdout) with
python_compat on, and prints the lines to add to it. An account's old work
dir is -work-dir-of NAME=DIR, else the first of WORK_DIR/NAME,
WORK_DIR/USERNAME, WORK_DIR/instance-N (N from 0, then 1) and, with one
account, WORK_DIR itself that holds a cache/ directory. Without
LINGMA_ACCOUNTS the old gateway ran one instance on WORK_DIR: it becomes the
account -name (default ` + config.LegacyInstanceName + `). A second run reports what the first did.
`

// How an old work dir comes over.
type mode string

const (
	modeCopy mode = "copied"
	modeMove mode = "moved"
	modeLink mode = "linked"
)

// options are the command's flags.
type options struct {
	envFile, accountsFile, dataDir, workDir, name, out string
	workDirOf                                          map[string]string
	mode                                               mode
}

// Run is `poolgate migrate` with its arguments (after "migrate") and the
// process's environment; formats gives the login format of a driver's
// workers (false: it keeps no login in its work dirs), the port this
// package owns and the wiring fills from the table of kinds and the
// session bundles' format, which sit above it. The
// configuration goes to stdout unless -o names a file; the report goes to
// stderr.
func Run(args, environ []string, formats func(driver string) (plainbundle.Format, bool), stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	env, err := oldEnvironment(o.envFile, o.accountsFile, environ)
	if err != nil {
		return err
	}
	m := &migration{opts: o, report: stderr}
	cfg, err := m.load(env)
	if err != nil {
		return err
	}
	f, ok := formats(cfg.Driver)
	if !ok {
		return fmt.Errorf("migrate: driver %q keeps no login in its work dirs, so there is none to bring over (nothing was changed)", cfg.Driver)
	}
	m.format = f
	plan, err := m.plan(cfg)
	if err != nil {
		return err
	}
	doc, err := m.check(cfg, plan, env)
	if err != nil {
		return err
	}
	if err := m.apply(plan); err != nil {
		return err
	}
	if err := m.write(doc, stdout); err != nil {
		return err
	}
	m.advise(cfg, env)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	o := options{workDirOf: map[string]string{}, mode: modeCopy}
	fs := flag.NewFlagSet("poolgate migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	fs.StringVar(&o.envFile, "env-file", "", "the Python gateway's .env")
	fs.StringVar(&o.accountsFile, "accounts-file", "", "a JSON file with the LINGMA_ACCOUNTS list")
	fs.StringVar(&o.dataDir, "data-dir", "", "poolgate's data_dir (required)")
	fs.StringVar(&o.workDir, "work-dir", "", "the old LINGMA_WORK_DIR (default: from the settings)")
	fs.StringVar(&o.name, "name", config.LegacyInstanceName, "the account made of a deployment without LINGMA_ACCOUNTS")
	fs.StringVar(&o.out, "o", "", "write the YAML config to this file (default stdout)")
	move := fs.Bool("move", false, "move the old work dirs instead of copying them (the Python gateway cannot run on them after)")
	link := fs.Bool("link", false, "link the old work dirs instead of copying them")
	fs.Func("work-dir-of", "NAME=DIR: the old work dir of account NAME (repeatable)", func(s string) error {
		name, dir, ok := strings.Cut(s, "=")
		if !ok || name == "" || dir == "" {
			return errors.New("want NAME=DIR")
		}
		o.workDirOf[name] = dir
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.dataDir == "" || fs.NArg() > 0:
		fs.Usage()
		return o, errors.New("migrate: -data-dir is required and takes no arguments")
	case *move && *link:
		return o, errors.New("migrate: -move and -link exclude each other (the default copies)")
	case *move:
		o.mode = modeMove
	case *link:
		o.mode = modeLink
	}
	abs, err := filepath.Abs(o.dataDir)
	if err != nil {
		return o, fmt.Errorf("migrate: -data-dir: %w", err)
	}
	o.dataDir = abs
	return o, nil
}

// oldEnvironment is the old settings: the .env file, the accounts file as
// LINGMA_ACCOUNTS, then this process's environment (which wins).
func oldEnvironment(envFile, accountsFile string, environ []string) ([]string, error) {
	var env []string
	if envFile != "" {
		vars, err := config.ReadEnvFile(envFile)
		if err != nil {
			return nil, err
		}
		env = append(env, vars...)
	}
	if accountsFile != "" {
		b, err := os.ReadFile(accountsFile)
		if err != nil {
			return nil, fmt.Errorf("migrate: accounts file: %w", err)
		}
		env = append(env, "LINGMA_ACCOUNTS="+strings.TrimSpace(string(b)))
	}
	return append(env, environ...), nil
}

// lookup is the last value of key in env (later entries win, as in
// oldEnvironment).
func lookup(env []string, key string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			val, found = v, true
		}
	}
	return val, found
}
