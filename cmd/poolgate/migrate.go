package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/session/bundle"
)

// `poolgate migrate` moves a Python gateway deployment over: it reads the
// old .env (and an accounts file), prints the poolgate configuration that
// means the same, moves or links each account's old work dir to
// data_dir/workers/<name>, and installs the accounts' plain session
// bundles into work dirs that have no credentials, so the first start
// needs no login.

const migrateUsage = `usage: poolgate migrate -data-dir DIR [-env-file OLD/.env] [-accounts-file FILE]
       [-work-dir OLD_WORK_DIR] [-work-dir-of NAME=DIR ...] [-link] [-o poolgate.yaml]

Reads the Python gateway's settings (the .env file, then this process's
environment), prints the equivalent poolgate YAML config (to -o, mode 0600,
or stdout), moves each account's old work dir to DIR/workers/NAME (-link:
a symbolic link instead) and installs plain session bundles
(LINGMA_SESSION_BUNDLE, an account's session_bundle) where no credentials
are. An account's old work dir is -work-dir-of NAME=DIR, else the first of
WORK_DIR/NAME, WORK_DIR/USERNAME, WORK_DIR/instance-N (N from 0, then 1)
and, with one account, WORK_DIR itself that holds a cache/ directory.
`

// migration is one run of `poolgate migrate`.
type migration struct {
	dataDir   string
	workDir   string
	workDirOf map[string]string
	link      bool
	report    io.Writer
}

func migrate(args []string, environ []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("poolgate migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, migrateUsage) }
	envFile := fs.String("env-file", "", "the Python gateway's .env")
	accountsFile := fs.String("accounts-file", "", "a JSON file with the LINGMA_ACCOUNTS list")
	dataDir := fs.String("data-dir", "", "poolgate's data_dir (required)")
	workDir := fs.String("work-dir", "", "the old LINGMA_WORK_DIR (default: from the settings)")
	link := fs.Bool("link", false, "link the old work dirs instead of moving them")
	out := fs.String("o", "", "write the YAML config to this file (default stdout)")
	m := &migration{workDirOf: map[string]string{}, report: stderr}
	fs.Func("work-dir-of", "NAME=DIR: the old work dir of account NAME (repeatable)", func(s string) error {
		name, dir, ok := strings.Cut(s, "=")
		if !ok || name == "" || dir == "" {
			return errors.New("want NAME=DIR")
		}
		m.workDirOf[name] = dir
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dataDir == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("migrate: -data-dir is required and takes no arguments")
	}
	env, err := migrationEnv(*envFile, *accountsFile, environ)
	if err != nil {
		return err
	}
	m.dataDir, m.link = *dataDir, *link
	// LINGMA_WORK_DIR is what this command consumes; the daemon refuses it.
	var kept []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LINGMA_WORK_DIR="); ok {
			m.workDir = v
			continue
		}
		kept = append(kept, kv)
	}
	if *workDir != "" {
		m.workDir = *workDir
	}
	cfg, notes, err := config.Load("", append(kept, "POOLGATE_DATA_DIR="+*dataDir))
	if err != nil {
		return fmt.Errorf("migrate: the old settings do not make a poolgate configuration: %w", err)
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, n)
	}
	installed, err := m.moveAccounts(cfg)
	if err != nil {
		return err
	}
	for i := range cfg.Accounts {
		if installed[cfg.Accounts[i].Name] {
			cfg.Accounts[i].SessionBundlePlain = "" // in the work dir now
		}
	}
	doc, err := configYAML(cfg)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(doc)
		return err
	}
	if err := os.WriteFile(*out, doc, 0o600); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s: start with poolgate -config %s\n", *out, *out)
	return nil
}

// migrationEnv is the old environment: the .env file, the accounts file
// as LINGMA_ACCOUNTS, then this process's environment (which wins).
func migrationEnv(envFile, accountsFile string, environ []string) ([]string, error) {
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

// moveAccounts brings each account's old work dir and plain bundle over;
// it returns the accounts whose work dir holds credentials now (their
// plain bundle, if any, is no longer needed).
func (m *migration) moveAccounts(cfg config.Config) (map[string]bool, error) {
	plain, err := pycompat.PlainBundles(cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	installed := map[string]bool{}
	for i, acct := range cfg.Accounts {
		target := filepath.Join(m.dataDir, "workers", acct.Name)
		if err := m.moveWorkDir(i, len(cfg.Accounts), acct, target); err != nil {
			return nil, fmt.Errorf("migrate: account %s: %w", acct.Name, err)
		}
		did, err := pycompat.InstallPlain(plain[acct.Name], target)
		if err != nil {
			return nil, fmt.Errorf("migrate: account %s: install its plain session bundle: %w", acct.Name, err)
		}
		if did {
			fmt.Fprintf(m.report, "%s: plain session bundle installed into %s\n", acct.Name, target)
		}
		if installed[acct.Name] = bundle.HasCredentials(target, bundle.LingmaSpec()); !installed[acct.Name] {
			fmt.Fprintf(m.report, "%s: no credentials: it will need a login at its first start\n", acct.Name)
		}
	}
	return installed, nil
}

// moveWorkDir moves (or links) the account's old work dir to target.
func (m *migration) moveWorkDir(i, n int, acct config.Account, target string) error {
	src := m.oldWorkDir(i, n, acct)
	if src == "" {
		fmt.Fprintf(m.report, "%s: no old work dir found\n", acct.Name)
		return nil
	}
	if bundle.HasCredentials(target, bundle.LingmaSpec()) {
		fmt.Fprintf(m.report, "%s: %s has credentials already; %s left where it is\n", acct.Name, target, src)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s exists and is not empty: move it away first: %w", target, err)
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	verb := "moved"
	if m.link {
		verb, err = "linked", os.Symlink(abs, target)
	} else {
		err = os.Rename(abs, target)
	}
	if err != nil {
		return fmt.Errorf("%s %s to %s: %w (on another file system, use -link or copy it there)", strings.TrimSuffix(verb, "d"), abs, target, err)
	}
	fmt.Fprintf(m.report, "%s: %s %s to %s\n", acct.Name, verb, abs, target)
	return nil
}

// oldWorkDir finds the account's old work dir: given with -work-dir-of,
// else the first candidate under the old work dir holding cache/.
func (m *migration) oldWorkDir(i, n int, acct config.Account) string {
	if d, ok := m.workDirOf[acct.Name]; ok {
		return d
	}
	if m.workDir == "" {
		return ""
	}
	cands := []string{acct.Name, acct.Username, "instance-" + strconv.Itoa(i), "instance-" + strconv.Itoa(i+1)}
	if n == 1 {
		cands = append(cands, ".")
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		d := filepath.Join(m.workDir, c)
		if st, err := os.Stat(filepath.Join(d, bundle.LingmaSpec().Dir)); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// configYAML renders the settings that differ from poolgate's defaults.
func configYAML(cfg config.Config) ([]byte, error) {
	def := config.Defaults()
	v, dv := reflect.ValueOf(cfg), reflect.ValueOf(def)
	out := map[string]any{}
	for i := range v.NumField() {
		key := v.Type().Field(i).Tag.Get("yaml")
		f := v.Field(i)
		if reflect.DeepEqual(f.Interface(), dv.Field(i).Interface()) {
			continue
		}
		switch x := f.Interface().(type) {
		case time.Duration:
			out[key] = x.String()
		case config.APIKeys:
			out[key] = x.Secrets()
		case []config.Account:
			out[key] = accountsYAML(x)
		default:
			out[key] = x
		}
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var doc yaml.Node
	doc.Kind = yaml.MappingNode
	for _, k := range keys {
		var val yaml.Node
		if err := val.Encode(out[k]); err != nil {
			return nil, err
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &val)
	}
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, err
	}
	return append([]byte("# poolgate configuration made by `poolgate migrate` from the Python gateway's settings.\n"+
		"# It holds secrets: keep it private. Start with: poolgate -config FILE\n"), b...), nil
}

// accountsYAML keeps each account's set fields only.
func accountsYAML(accts []config.Account) []map[string]any {
	out := make([]map[string]any, 0, len(accts))
	for _, a := range accts {
		m := map[string]any{"name": a.Name}
		for k, v := range map[string]string{"username": a.Username, "password": a.Password,
			"password_env": a.PasswordEnv, "password_file": a.PasswordFile, "session_bundle_plain": a.SessionBundlePlain} {
			if v != "" {
				m[k] = v
			}
		}
		if a.PasswordEnv != "" || a.PasswordFile != "" {
			delete(m, "password") // resolved from there at every start
		}
		out = append(out, m)
	}
	return out
}
