package config

import (
	"fmt"
	"path"
	"slices"
	"strings"
)

// validateAccounts checks the accounts: names, that a worker binary has
// accounts to run (the bundled simulator serves its demo accounts without)
// and each account a binary once one is named, and that sealed bundles
// come with the key that opens them. The daemon and
// `poolgate migrate` both load through here, so a configuration migrate
// writes is one the daemon starts with.
func (c *Config) validateAccounts() []error {
	var errs []error
	seen := map[string]bool{}
	for _, a := range c.Accounts {
		if seen[a.Name] {
			errs = append(errs, fmt.Errorf("account name %q is used twice", a.Name))
		}
		seen[a.Name] = true
		if strings.ContainsAny(a.Name, "/\\ \x00") || a.Name == "." || a.Name == ".." {
			errs = append(errs, fmt.Errorf("account name %q: use letters, digits, '-', '_' or '.'", a.Name))
		}
		if c.BundleKey == "" && (a.SessionBundle != "" || a.SessionBundleFile != "") {
			errs = append(errs, fmt.Errorf("account %s carries a sealed session bundle but bundle_key (POOLGATE_BUNDLE_KEY) is not set: set the key it was sealed with", a.Name))
		}
		if slices.Contains(a.Models, "") {
			errs = append(errs, fmt.Errorf("account %s: models lists an empty name", a.Name))
		}
		// A pool is simulated whole or not at all (Simulated): once any
		// binary is named, an account without one would have none.
		if c.BinOf(a) == "" && !c.Simulated() {
			errs = append(errs, fmt.Errorf("account %s has no worker binary while others have one: set its worker_bin, or the top-level worker_bin (POOLGATE_WORKER_BIN)", a.Name))
		}
	}
	for _, p := range c.DefaultModelNames {
		if _, err := path.Match(p, ""); err != nil {
			errs = append(errs, fmt.Errorf("default_model_names %q: %w (a shell pattern such as claude-*)", p, err))
		}
	}
	if c.WorkerBin != "" && len(c.Accounts) == 0 {
		errs = append(errs, fmt.Errorf("worker_bin is set but no accounts are: set POOLGATE_ACCOUNTS (a JSON list of {name, username, password}; "+
			"the Python gateway's LINGMA_ACCOUNTS) or POOLGATE_ACCOUNTS_FILE. A Python gateway without LINGMA_ACCOUNTS ran one instance "+
			"on LINGMA_WORK_DIR: `poolgate migrate -env-file OLD/.env -data-dir DIR` makes it an account (%s) and copies its login", LegacyInstanceName))
	}
	return errs
}

// LegacyInstanceName is the name of the one instance a Python gateway ran
// without LINGMA_ACCOUNTS, which `poolgate migrate` gives the account it
// makes of that instance's work dir, so that the old scripts' ?instance=
// still names it.
const LegacyInstanceName = "lingma-0"
