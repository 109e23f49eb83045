package daemon

import (
	"cmp"
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session"
	"github.com/poolgate/poolgate/session/bundle"
)

// Setup of the daemon's parts from the configuration: the workers and their
// driver, the session store, session bundles and the login runner.

// setupBundles: credentials are restored into an empty work dir before a
// worker starts (from the store, else the account's configured bundle), and
// saved to the store each time an instance becomes ready.
func (a *app) setupBundles() error {
	var key []byte
	if a.cfg.BundleKey != "" {
		k, err := bundle.ParseKey(a.cfg.BundleKey)
		if err != nil {
			return fmt.Errorf("POOLGATE_BUNDLE_KEY: %w", err)
		}
		key = k
	}
	configured, err := configuredBundles(a.cfg)
	if err != nil {
		return err
	}
	plain, err := plainBundles(a.cfg)
	if err != nil {
		return err
	}
	a.plainBundles.Store(&plain)
	bcfg := bundle.Config{Key: key, SpecFor: a.specFor, Configured: configured}
	if a.cfg.AdvertiseURL != "" {
		// The cluster is made after the bundles; it is there before any
		// worker starts, which is when the first bundle is saved.
		bcfg.Token = func(account string) (int64, bool) { return a.cluster.Token(account) }
	}
	a.bundles = bundle.New(bcfg, bundleHomes{sup: a.sup, cluster: func() *cluster.Cluster { return a.cluster }}, a.bundleStore, a.log.With("component", "bundles"))
	return nil
}

// bundleHooks restores credentials before a worker starts and saves them
// when it is ready. The supervisor is made with them before the bundle
// service, which needs the supervisor (setupBundles): they run only after
// Start, when that service is there.
func (a *app) bundleHooks() supervisor.Hooks {
	return supervisor.Hooks{
		PreStart: func(ctx context.Context, t supervisor.LoginTarget) error {
			installed, err := plainbundle.Install((*a.plainBundles.Load())[t.Account.Name], t.WorkDir, plainFormat(a.specFor(t.Instance)))
			if err != nil {
				return fmt.Errorf("install the configured plain session bundle: %w", err)
			}
			if installed {
				a.log.Info("configured plain session bundle installed", "instance", t.Instance, "account", t.Account.Name)
			}
			_, err = a.bundles.Restore(ctx, t.Account.Name, t.WorkDir)
			return err
		},
		Ready: func(ctx context.Context, t supervisor.LoginTarget) {
			// A worker may still be writing its credentials right after the
			// login is confirmed: save them a moment later.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			if err := a.bundles.Saved(ctx, t.Account.Name, t.WorkDir); err != nil {
				a.log.Warn("save session bundle", "instance", t.Instance, "err", err)
			}
		},
	}
}

// specFor is the credential layout of the named account's workers (its
// kind's), which session bundles carry: the kind of the worker that runs
// it now, so an account whose kind a reload changed moves to its new
// layout with its new worker.
func (a *app) specFor(account string) bundle.Spec {
	if w, ok := a.sup.Worker(account); ok {
		return specOf(w.Kind())
	}
	return bundle.Spec(a.kind.Credentials)
}

// plainBundles opens the accounts' plain session bundles (plainbundle.Load),
// each account's in its kind's layout.
func plainBundles(cfg config.Config) (map[string]plainbundle.Bundle, error) {
	out := map[string]plainbundle.Bundle{}
	for _, k := range kinds {
		of := cfg
		of.Accounts = nil
		for _, acct := range cfg.Accounts {
			if ak, err := kindOf(cfg, acct); err == nil && ak.Name == k.Name {
				of.Accounts = append(of.Accounts, acct)
			}
		}
		plain, err := plainbundle.Load(of, plainFormat(k.Credentials))
		if err != nil {
			return nil, err
		}
		maps.Copy(out, plain)
	}
	return out, nil
}

// configuredBundles reads the accounts' configured session bundles (sealed,
// by account name).
func configuredBundles(cfg config.Config) (map[string][]byte, error) {
	configured := map[string][]byte{}
	for _, acct := range cfg.Accounts {
		b64 := acct.SessionBundle
		if acct.SessionBundleFile != "" {
			raw, err := os.ReadFile(acct.SessionBundleFile)
			if err != nil {
				return nil, fmt.Errorf("account %s: session_bundle_file: %w", acct.Name, err)
			}
			b64 = string(raw)
		}
		if b64 = strings.TrimSpace(b64); b64 == "" {
			continue
		}
		sealed, err := decodeBundle(b64)
		if err != nil {
			return nil, fmt.Errorf("account %s: session_bundle: %w", acct.Name, err)
		}
		configured[acct.Name] = sealed
	}
	return configured, nil // config.Validate has checked that a key is set for them
}

// bundleHomes tells the bundle service where the supervisor's instances
// keep their credentials. On a replica of a cluster it knows only the
// accounts this replica holds: an import or export for any other would
// write credentials and start a worker beside the holder's.
type bundleHomes struct {
	sup     *supervisor.Supervisor
	cluster func() *cluster.Cluster // nil result: not clustered
}

func (h bundleHomes) Home(name string) (bundle.Home, error) {
	w, ok := h.sup.Worker(name)
	if !ok {
		return bundle.Home{}, fmt.Errorf("instance %s: %w", name, supervisor.ErrUnknownInstance)
	}
	if c := h.cluster(); c != nil {
		if err := held(c, name); err != nil {
			return bundle.Home{}, err
		}
	}
	return bundle.Home{Account: w.Account(), Username: w.Username(), WorkDir: w.WorkDir(),
		LoggedOut: w.Status().State == supervisor.StateNeedsLogin}, nil
}

func (h bundleHomes) Restart(name string) error {
	if c := h.cluster(); c != nil {
		if err := held(c, name); err != nil {
			return err
		}
	}
	return h.sup.Restart(name)
}

// decodeBundle accepts a bundle as exported (the JSON of the export
// endpoint) or as its bare base64.
func decodeBundle(s string) ([]byte, error) {
	if strings.HasPrefix(s, "{") {
		var exp struct {
			Bundle string `json:"bundle"`
		}
		if err := json.Unmarshal([]byte(s), &exp); err != nil {
			return nil, err
		}
		s = exp.Bundle
	}
	return base64.StdEncoding.DecodeString(s)
}

// setupLogin starts the login runner when a Chromium is there; without one,
// logins are manual (the admin API hands out the URL and forwards the
// callback).
func (a *app) setupLogin(m *metrics.Metrics, getenv func(string) string, env []string) error {
	cfg := a.cfg
	recipe := cfg.LoginRecipe
	if recipe == "" {
		recipe = "simworker"
		if cfg.WorkerBin != "" && a.kind.LoginRecipe != "" {
			recipe = a.kind.LoginRecipe
		}
	}
	r, err := login.NewRunner(login.Config{Chromium: cfg.Chromium, Concurrency: cfg.LoginConcurrency,
		RecipeFile: cfg.LoginRecipes, DefaultRecipe: recipe, Stealth: cfg.LoginStealth, Getenv: getenv, Env: env,
		LoginTimeout: cfg.LoginTimeout, MaxAttempts: cfg.LoginAttempts, Headless: &cfg.LoginHeadless,
		TempDir: filepath.Join(cfg.DataDir, "login-profiles"), Metrics: m, Tracing: a.tracing}, a.log.With("component", "login"))
	switch {
	case errors.Is(err, login.ErrNoChromium):
		a.log.Warn("automatic login is off: no Chromium found (set POOLGATE_CHROMIUM or install chromium); use the admin API's manual login", "err", err)
		return nil
	case err != nil:
		return fmt.Errorf("login: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "login-profiles"), 0o700); err != nil {
		return fmt.Errorf("login profiles dir: %w", err)
	}
	a.login = r
	return nil
}

// openStores opens the session store and the bundle store beside it: both
// in memory, or both on Redis, whose connection is also returned for the
// cluster's lease store to share (nil without Redis). Closing the session
// store closes the connection.
func openStores(cfg config.Config, m *metrics.Metrics, onEvict func(route.Affinity), log *slog.Logger) (store, bundle.Store, redis.UniversalClient, error) {
	mem := session.MemoryConfig{OnEvict: onEvict, MaxAffinity: cfg.SessionCacheSize, AffinityTTL: cfg.SessionCacheTTL}
	if cfg.RedisURL == "" {
		return session.NewMemory(mem), bundle.NewMemoryStore(), nil, nil
	}
	client, err := redisconn.Dial(cfg.Redis())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("redis: %w", err)
	}
	var bundles *bundle.RedisStore
	// A Redis that comes back from an outage may have come back empty: put
	// the bundles this replica has back, so that whichever replica leases
	// an account next can start it without a login.
	republish := func(ctx context.Context) {
		if n, err := bundles.Republish(ctx); err != nil {
			log.Warn("put session bundles back into redis", "err", err)
		} else if n > 0 {
			log.Info("session bundles put back into redis, which had lost them", "bundles", n)
		}
	}
	r := session.NewRedis(session.RedisConfig{Prefix: cfg.RedisPrefix, Memory: mem, Logger: log,
		OwnerMaxResponses: cfg.StoredResponsesPerKey, OwnerMaxResponseBytes: cfg.StoredResponseBytesPerKey,
		OnError: func(op string, _ error) { m.StoreErrors.WithLabelValues(op).Inc() }, OnRecover: republish,
		OnHealth: func(up bool) { m.RedisUp.Set(b2f(up)) }, OnHeld: func(n int) { m.AffinityHeld.Set(float64(n)) }}, client)
	m.RedisUp.Set(1) // until a call fails: nothing connects before the first one
	bundles = bundle.NewRedisStore(r.Conn())
	return r, bundles, client, nil
}

// namesKey keys the conversations' names (pool/route): derived from
// the cluster token, which every replica of a deployment shares and no
// client knows, so the replicas name a conversation alike and nobody
// without the token can test a guessed prompt against a name. Without a
// token (one replica) the router draws a key of its own at each start.
func namesKey(cfg config.Config) []byte {
	if cfg.ClusterToken == "" {
		return nil
	}
	key, err := hkdf.Key(sha256.New, []byte(cfg.ClusterToken), nil, "poolgate conversation names v1", 32)
	if err != nil {
		return nil // only for a length SHA-256 cannot give, which 32 is not
	}
	return key
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// toolPolicy is the router's tool policy from the configuration.
func toolPolicy(cfg config.Config) route.ToolPolicy {
	p := route.ToolPolicy{Off: !cfg.ToolForwarding}
	if len(cfg.ToolAllowlist) > 0 {
		p.Allow = make(map[string]bool, len(cfg.ToolAllowlist))
		for _, name := range cfg.ToolAllowlist {
			p.Allow[name] = true
		}
	}
	return p
}

// workerSetup finds the top-level driver's kind and builds one worker
// config per account, each with its kind's driver. With no worker binary
// configured, the pool runs this executable's simworker, speaking each
// account's kind's protocol; with no accounts either, two simulated
// accounts of the top-level kind (logged in, for a kind with a login).
func workerSetup(cfg config.Config, drivers *workerDrivers, log *slog.Logger) (worker.Kind, []supervisor.WorkerConfig, error) {
	kind, err := kindOf(cfg, config.Account{})
	if err != nil {
		return worker.Kind{}, nil, err
	}
	if cfg.Simulated() {
		if len(cfg.Accounts) == 0 {
			log.Warn("SIMULATED POOL: nothing is configured, so poolgate serves two simulated accounts whose answers come from no model (set POOLGATE_ACCOUNTS and POOLGATE_WORKER_BIN for real ones)",
				"simulate", cfg.Simulate)
		} else {
			log.Warn("SIMULATED POOL: the configured accounts are served by the bundled simulator (simulate=true), not by a real worker")
		}
	}
	workers, err := workerConfigs(cfg, drivers)
	if err != nil {
		return kind, nil, err
	}
	return kind, workers, nil
}

// workerConfigs makes one worker config per account: the configured ones,
// else (with the bundled simulator) two simulated accounts. In a cluster
// (advertise_url set) every worker is held: a replica runs only the
// accounts it leases. Each account runs its kind's driver, made for its
// binary (drivers).
func workerConfigs(cfg config.Config, drivers *workerDrivers) ([]supervisor.WorkerConfig, error) {
	accounts, demo := cfg.Accounts, len(cfg.Accounts) == 0
	if demo {
		accounts = config.DefaultAccounts() // the simulator's demo: config.Validate refuses a worker_bin without accounts
	}
	workers := make([]supervisor.WorkerConfig, 0, len(accounts))
	for _, acct := range accounts {
		kind, err := kindOf(cfg, acct)
		if err != nil {
			return nil, err
		}
		bin := cfg.BinOf(acct)
		drv, err := drivers.driver(kind, bin, cfg.ArgsOf(acct), demo)
		if err != nil {
			return nil, fmt.Errorf("account %s: %w", acct.Name, err)
		}
		var models []chat.Model
		for _, id := range acct.Models {
			models = append(models, chat.Model{ID: id})
		}
		workers = append(workers, supervisor.WorkerConfig{
			Name:           acct.Name,
			Account:        poolAccount(acct, kind, bin == ""),
			Driver:         drv,
			Kind:           kind.Name,
			Models:         models,
			WorkDir:        filepath.Join(cfg.DataDir, "workers", acct.Name),
			MaxInFlight:    cfg.InstanceMaxInFlight,
			StartTimeout:   cfg.StartTimeout,
			HealthInterval: cfg.HealthInterval,
			HealthTimeout:  cfg.HealthTimeout,
			BackoffMax:     cfg.BackoffMax,
			Recipe:         recipeOf(cfg, acct, kind, bin == ""),
			AutoLogin:      cfg.AutoLogin,
			Held:           cfg.AdvertiseURL != "",
		})
	}
	return workers, nil
}

// recipeOf names an account's login recipe: its own; for the top-level
// driver's accounts "", the login runner's default (login_recipe, else the
// kind's); for another kind's, its kind's recipe (the simulator's, when
// simulated).
func recipeOf(cfg config.Config, acct config.Account, kind worker.Kind, sim bool) string {
	switch {
	case acct.Recipe != "":
		return acct.Recipe
	case kind.Name == cfg.Driver:
		return ""
	case !sim && kind.LoginRecipe != "":
		return kind.LoginRecipe
	}
	return "simworker"
}

// adoptWorkDirs moves the work dir of an account the configuration names
// no more (it was named after its username before names defaulted to
// account-N) to the account's name now, so its credentials stay and it needs
// no new login. Only a dir no configured account is named after is moved.
func adoptWorkDirs(cfg config.Config, log *slog.Logger) {
	named := map[string]bool{}
	for _, acct := range cfg.Accounts {
		named[acct.Name] = true
	}
	for _, acct := range cfg.Accounts {
		if !acct.Unnamed || acct.Username == "" || named[acct.Username] || strings.ContainsAny(acct.Username, "/\\\x00") ||
			acct.Username == "." || acct.Username == ".." {
			continue
		}
		old := filepath.Join(cfg.DataDir, "workers", acct.Username)
		dir := filepath.Join(cfg.DataDir, "workers", acct.Name)
		if _, err := os.Stat(old); err != nil {
			continue
		}
		if _, err := os.Stat(dir); err == nil {
			continue
		}
		if err := os.Rename(old, dir); err != nil {
			log.Warn("account work dir not moved: its account may need a new login", "account", acct.Name, "from", old,
				"to", dir, "err", err)
			continue
		}
		log.Info("account without a name is now named after its place; its work dir moved with it (set name: to choose one)",
			"account", acct.Name, "from", old, "to", dir)
	}
}

// poolAccount converts a configured account. Its process gets the account's
// own env entries, and the bundled simulator (only it) its credentials in
// SIMWORKER_ACCOUNTS, which is how it knows whom to let log in. A simulated
// account with no username has no login to play: its simulator starts
// logged in as its own default user (or with the kind's demo secret), as
// the demo accounts do.
func poolAccount(acct config.Account, kind worker.Kind, sim bool) worker.Account {
	var env []string
	args := acct.Args
	switch {
	case sim && acct.Username == "":
		args = append(append([]string(nil), kind.DemoArgs...), acct.Args...)
		acct.Password = cmp.Or(acct.Password, kind.DemoSecret)
	case sim:
		env = append(env, "SIMWORKER_ACCOUNTS="+acct.Username+":"+acct.Password)
	}
	keys := make([]string, 0, len(acct.Env))
	for k := range acct.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+acct.Env[k])
	}
	return worker.Account{Name: acct.Name, Username: acct.Username, Password: acct.Password, Env: env, Args: args,
		Record: acct.Record}
}
