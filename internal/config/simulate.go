package config

import (
	"fmt"
	"strings"
)

// The bundled simulator answers "You said: ..." to anyone: right for a
// first `go run` on a laptop, wrong for anything that was configured to
// serve people. So in auto mode it starts only when nothing marks a
// deployment (no accounts, keys, tokens, bundle key, Redis, cluster, and
// every listener on loopback); anything else without a worker binary is
// refused at start with what to set. Tuning settings (log level, limits,
// timeouts, a loopback port, the data dir) are not a deployment: a
// developer may change them and keep the demo pool.

// Simulated reports whether the bundled simulator serves the pool (no
// worker binary, neither the top-level one nor an account's; Validate has
// checked simulate allows it, and that a pool is simulated whole or not
// at all).
func (c *Config) Simulated() bool { return c.WorkerBin == "" && len(c.accountBins()) == 0 }

// accountBins names the accounts that set a worker binary of their own.
func (c *Config) accountBins() []string {
	var names []string
	for _, a := range c.Accounts {
		if a.WorkerBin != "" {
			names = append(names, a.Name)
		}
	}
	return names
}

// BinOf returns the worker binary of the account ("" = the bundled
// simulator): its own, else the top-level one.
func (c *Config) BinOf(a Account) string {
	if a.WorkerBin != "" {
		return a.WorkerBin
	}
	return c.WorkerBin
}

// ArgsOf returns the driver's arguments of the account: its own, else
// the top-level worker_args when the account is of the top-level driver.
func (c *Config) ArgsOf(a Account) []string {
	if a.WorkerArgs != nil || (a.Driver != "" && a.Driver != c.Driver) {
		return a.WorkerArgs
	}
	return c.WorkerArgs
}

// DeploymentSettings names the settings that mark this configuration as a
// deployment, which in auto mode keeps the simulated pool from starting.
func (c *Config) DeploymentSettings() []string {
	var set []string
	add := func(on bool, key string) {
		if on {
			set = append(set, key)
		}
	}
	add(len(c.Accounts) > 0, "accounts")
	add(len(c.APIKeys) > 0, "api_keys")
	add(c.AdminToken != "", "admin_token")
	add(c.MetricsToken != "", "metrics_token")
	add(c.MetricsPublic, "metrics_public")
	add(c.BundleKey != "", "bundle_key")
	add(c.RedisURL != "", "redis_url")
	add(c.AdvertiseURL != "", "advertise_url")
	add(c.ClusterToken != "", "cluster_token")
	add(c.Insecure, "insecure")
	add(!IsLoopback(c.Listen), "listen (not loopback)")
	add(c.AdminListen != "" && !IsLoopback(c.AdminListen), "admin_listen (not loopback)")
	return set
}

// validateSimulate checks the simulate setting against the rest.
func (c *Config) validateSimulate() error {
	const real = "set POOLGATE_WORKER_BIN (the Python gateway's LINGMA_BIN) to the Lingma binary"
	own := c.accountBins()
	switch c.Simulate {
	case "true":
		if c.WorkerBin != "" {
			return fmt.Errorf("simulate=true runs the bundled simulator, but worker_bin is set to %q: unset one of them", c.WorkerBin)
		}
		if len(own) > 0 {
			return fmt.Errorf("simulate=true runs the bundled simulator, but accounts %s set a worker_bin of their own: unset one or the other", strings.Join(own, ", "))
		}
	case "false":
		if c.WorkerBin == "" && len(own) == 0 {
			return fmt.Errorf("simulate=false and no worker_bin: %s", real)
		}
	case "auto":
		if c.WorkerBin != "" || len(own) > 0 {
			return nil
		}
		if len(c.Accounts) > 0 {
			return fmt.Errorf("accounts are configured but no worker_bin, and the bundled simulator never serves configured accounts unasked: %s, or POOLGATE_SIMULATE=true to serve them with the simulator", real)
		}
		if set := c.DeploymentSettings(); len(set) > 0 {
			return fmt.Errorf("no accounts are configured, and the simulated demo pool starts only when nothing is (set: %s): "+
				"set POOLGATE_ACCOUNTS (LINGMA_ACCOUNTS) and POOLGATE_WORKER_BIN (LINGMA_BIN), or POOLGATE_SIMULATE=true for the demo pool",
				strings.Join(set, ", "))
		}
	default:
		return fmt.Errorf("simulate %q: use auto, true or false", c.Simulate)
	}
	return nil
}
