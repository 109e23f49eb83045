package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat"
)

// Live reload: SIGHUP or POST /internal/reload re-reads the config file and
// the environment. Accounts (accounts, accounts_file) and API keys
// (api_keys) take effect at once; every other setting is wired into a
// listener, a store, the driver or the pool's limits at start, so a new
// value of one of those is reported as needing a restart and left as it is.
// A configuration that does not load or validate is refused whole.

var _ admin.Reloader = (*app)(nil)

// Reload re-reads the configuration and applies its reloadable part
// (admin.Reloader). Reloads run one at a time; a turn in flight finishes
// on the settings it started with.
func (a *app) Reload() (admin.ReloadReport, error) {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	next, warnings, err := config.Load(a.cfgPath, a.environ(), pycompat.ReadSettings)
	if err != nil {
		return admin.ReloadReport{}, a.refuse(err)
	}
	for _, w := range warnings {
		a.log.Warn(w)
	}
	old := a.applied
	merged := old
	merged.Accounts, merged.AccountsFile, merged.APIKeys = next.Accounts, next.AccountsFile, next.APIKeys
	// The new keys and accounts must hold with the settings in force (no
	// keys on a public listener, say), not only with the new file's.
	if err := merged.Validate(); err != nil {
		return admin.ReloadReport{}, a.refuse(err)
	}
	bundles, err := configuredBundles(merged)
	if err != nil {
		return admin.ReloadReport{}, a.refuse(err)
	}
	plain, err := plainBundles(merged)
	if err != nil {
		return admin.ReloadReport{}, a.refuse(err)
	}
	// An account of a new kind or binary gets its driver here; one that
	// keeps both keeps its driver, and so its worker.
	workers, err := workerConfigs(merged, a.drivers)
	if err != nil {
		return admin.ReloadReport{}, a.refuse(err)
	}

	// Everything checked: apply. Keys first, in one swap: the next request
	// is judged by the new set, one under way keeps its key.
	rep := admin.ReloadReport{RestartRequired: restartOnly(old, next)}
	rep.Applied.APIKeys = diffKeys(old.APIKeys, merged.APIKeys)
	a.keys.Store(keysOf(merged))
	a.metrics.InitKeys(a.keys.Load().Names())
	a.bundles.SetConfigured(bundles)
	a.plainBundles.Store(&plain)
	ch, err := a.sup.Apply(workers)
	if err != nil {
		// Only a shutdown under way: the keys are in force, the accounts
		// stay as they were.
		merged.Accounts, merged.AccountsFile = old.Accounts, old.AccountsFile
		a.applied = merged
		return admin.ReloadReport{}, fmt.Errorf("apply accounts: %w", err)
	}
	a.applied = merged
	rep.Applied.Accounts = admin.Diff{Added: orEmpty(ch.Added), Removed: orEmpty(ch.Removed), Changed: orEmpty(ch.Changed)}
	a.logReload(rep)
	if len(ch.Restarted) > 0 {
		a.log.Info("reload: failed instances started again", "instances", ch.Restarted)
	}
	return rep, nil
}

// refuse logs and wraps a configuration a reload will not apply.
func (a *app) refuse(err error) error {
	a.log.Error("reload refused: the configuration in force stays", "err", err)
	return fmt.Errorf("%w: %w", admin.ErrConfigInvalid, err)
}

func (a *app) logReload(rep admin.ReloadReport) {
	acc, keys := rep.Applied.Accounts, rep.Applied.APIKeys
	attrs := []any{
		slog.Group("accounts", "added", acc.Added, "removed", acc.Removed, "changed", acc.Changed),
		slog.Group("api_keys", "added", keys.Added, "removed", keys.Removed, "changed", keys.Changed),
		"accounts_now", a.pool.Size(),
	}
	a.log.Info("configuration reloaded", attrs...)
	if len(rep.RestartRequired) > 0 {
		a.log.Warn("reload left settings that take a restart as they were: restart poolgate to apply them",
			"restart_required", strings.Join(rep.RestartRequired, ","))
	}
}

// onSignal reloads on SIGHUP; the outcome is in the log.
func (a *app) onSignal() {
	a.log.Info("SIGHUP: reloading the configuration")
	if _, err := a.Reload(); err != nil && !errors.Is(err, admin.ErrConfigInvalid) {
		a.log.Error("reload failed", "err", err) // a refusal was logged already
	}
}

// restartOnly lists the keys, other than the reloadable ones, whose value in
// next differs from the one in force.
func restartOnly(cur, next config.Config) []string {
	out := []string{}
	cv, nv := cur.ByKey(), next.ByKey()
	for key, v := range cv {
		if !config.Reloadable(key) && !reflect.DeepEqual(v, nv[key]) {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// diffKeys names the keys added, removed and changed (secret, role or
// limits).
func diffKeys(cur, next config.APIKeys) admin.Diff {
	d := admin.Diff{Added: []string{}, Removed: []string{}, Changed: []string{}}
	byName := make(map[string]config.APIKey, len(cur))
	for _, k := range cur {
		byName[k.Name] = k
	}
	seen := map[string]bool{}
	for _, k := range next {
		seen[k.Name] = true
		switch old, ok := byName[k.Name]; {
		case !ok:
			d.Added = append(d.Added, k.Name)
		case old.Key != k.Key || old.Role != k.Role || old.RPM != k.RPM || old.Concurrency != k.Concurrency || old.TokensPerDay != k.TokensPerDay:
			d.Changed = append(d.Changed, k.Name)
		}
	}
	for _, k := range cur {
		if !seen[k.Name] {
			d.Removed = append(d.Removed, k.Name)
		}
	}
	return d
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
