package migrate

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
)

// migration is one run of `poolgate migrate`.
type migration struct {
	opts   options
	report io.Writer
	// workDir is the old LINGMA_WORK_DIR ("" when unknown).
	workDir string
	// oneInstance: the old settings list no accounts, so the Python gateway
	// ran one instance on workDir, which becomes account opts.name.
	oneInstance bool
	// compatSet: python_compat was not in the old settings, and migrate
	// turned it on.
	compatSet bool
	journal   *journal
	// format is the login format of the configured driver's workers: the
	// files that are a login, which the old work dirs must hold.
	format plainbundle.Format
}

// step is what one account needs to have its login here.
type step struct {
	acct   config.Account
	target string             // data_dir/workers/NAME
	src    string             // the old work dir to bring over ("" none)
	plain  plainbundle.Bundle // the plain bundle to install where no credentials are (nil none)
	// inPlace: the target holds credentials already (an earlier run, or
	// poolgate's own login); nothing is brought.
	inPlace bool
	// creds: the account will have credentials once the step is done, so
	// its plain bundle stays out of the configuration.
	creds bool
}

// load reads the old settings into a poolgate configuration: LINGMA_WORK_DIR
// is this command's, a deployment without accounts gets the one the Python
// gateway ran, python_compat is on unless the settings say otherwise.
func (m *migration) load(env []string) (config.Config, error) {
	var kept []string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LINGMA_WORK_DIR="); ok {
			m.workDir = v
			continue
		}
		kept = append(kept, kv)
	}
	if m.opts.workDir != "" {
		m.workDir = m.opts.workDir
	}
	_, lingma := lookup(env, "LINGMA_ACCOUNTS")
	_, accts := lookup(env, "POOLGATE_ACCOUNTS")
	_, file := lookup(env, "POOLGATE_ACCOUNTS_FILE")
	if m.oneInstance = !lingma && !accts && !file; m.oneInstance {
		one, _ := json.Marshal([]map[string]string{{"name": m.opts.name}})
		kept = append(kept, "POOLGATE_ACCOUNTS="+string(one))
	}
	if _, set := lookup(env, "POOLGATE_PYTHON_COMPAT"); !set {
		kept = append(kept, "POOLGATE_PYTHON_COMPAT=true")
		m.compatSet = true
	}
	cfg, notes, err := config.Load("", append(kept, "POOLGATE_DATA_DIR="+m.opts.dataDir), pycompat.ReadSettings)
	if err != nil {
		return cfg, fmt.Errorf("migrate: the old settings do not make a poolgate configuration, so nothing was changed: %w", err)
	}
	for _, n := range notes {
		fmt.Fprintln(m.report, n)
	}
	if m.oneInstance {
		fmt.Fprintf(m.report, "no LINGMA_ACCOUNTS: the Python gateway ran one instance on LINGMA_WORK_DIR (%s); it is account %s here "+
			"(-name chooses another: the name the old gateway's /healthz listed)\n", orUnknown(m.workDir), m.opts.name)
	}
	return cfg, nil
}

func orUnknown(s string) string {
	if s == "" {
		return "not set"
	}
	return s
}

// plan finds, for each account, what brings its login over, and refuses
// before anything changes what could not be done.
func (m *migration) plan(cfg config.Config) ([]step, error) {
	j, err := readJournal(m.opts.dataDir)
	if err != nil {
		return nil, err
	}
	m.journal = j
	plain, err := plainbundle.Load(cfg, m.format)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	steps := make([]step, 0, len(cfg.Accounts))
	for i, acct := range cfg.Accounts {
		s := step{acct: acct, target: filepath.Join(m.opts.dataDir, "workers", acct.Name), plain: plain[acct.Name]}
		s.inPlace = m.format.HasCredentials(s.target)
		if !s.inPlace {
			s.src = m.oldWorkDir(i, len(cfg.Accounts), acct)
		}
		if s.src != "" {
			if err := checkTarget(s.src, s.target); err != nil {
				return nil, fmt.Errorf("migrate: account %s: %w (nothing was changed)", acct.Name, err)
			}
		}
		s.creds = s.inPlace || s.plain != nil || (s.src != "" && m.format.HasCredentials(s.src))
		steps = append(steps, s)
	}
	return steps, nil
}

// oldWorkDir finds the account's old work dir: given with -work-dir-of,
// else the first candidate under the old work dir holding the credential
// dir (cache/).
func (m *migration) oldWorkDir(i, n int, acct config.Account) string {
	if d, ok := m.opts.workDirOf[acct.Name]; ok {
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
		if st, err := os.Stat(filepath.Join(d, m.format.CredentialDir())); err == nil && st.IsDir() {
			return d
		}
	}
	return ""
}

// checkTarget refuses a target that an old work dir cannot come to: one
// inside the old dir (a copy would hold itself), or a dir with files in it.
func checkTarget(src, target string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(abs, target); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is inside the old work dir %s: choose a -data-dir outside it", target, abs)
	}
	entries, err := os.ReadDir(target)
	switch {
	case os.IsNotExist(err):
		return nil
	case err != nil:
		return err
	case len(entries) > 0:
		return fmt.Errorf("%s exists, holds files but no credentials, and %s would come there: move it away first", target, abs)
	}
	return nil
}
