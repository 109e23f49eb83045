package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/bundles"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/tokens"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool"
	"github.com/poolgate/poolgate/pool/lingma"
	openaidrv "github.com/poolgate/poolgate/pool/openai"
	"github.com/poolgate/poolgate/session"
)

func serve(ctx context.Context, args, environ []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("poolgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "YAML config file (keys as in the README; env POOLGATE_* overrides)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, warnings, err := config.Load(*cfgPath, environ)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	// go-redis logs its own dial failures to stderr; the store already logs
	// an outage once, so keep the library's lines at debug level.
	redis.SetLogger(redisLogger{log})
	for _, w := range warnings {
		log.Warn(w)
	}
	app, err := build(cfg, log, environ)
	if err != nil {
		return err
	}
	return app.run(ctx)
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// app is the wired daemon.
type app struct {
	cfg      config.Config
	log      *slog.Logger
	pool     *pool.Pool
	launcher *pool.ExecLauncher
	router   *pool.Router
	cluster  *pool.Cluster // nil on a single node
	login    *login.Runner // nil without Chromium
	bundles  *bundles.Service
	store    store
	api      *http.Server
	admin    *http.Server // nil when admin shares the API listener
}

// store is what main needs of a session store beyond what its users need.
type store interface {
	pool.AffinityStore
	responses.Store
	admin.AffinityFlusher
	bundles.StoreLike
	Run(ctx context.Context)
	Close() error
}

func build(cfg config.Config, log *slog.Logger, environ []string) (*app, error) {
	lookup := getenv(environ)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	driver, workers, err := workerSetup(cfg, log)
	if err != nil {
		return nil, err
	}
	clustered := cfg.AdvertiseURL != ""
	for i := range workers {
		workers[i].Held = clustered // a replica runs only the accounts it leases
	}
	a := &app{cfg: cfg, log: log, launcher: &pool.ExecLauncher{Env: workerEnv(environ)}}
	a.pool = pool.New(pool.Config{MaxInFlight: cfg.MaxInFlight, MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout},
		workers, driver, a.launcher, m, log)
	onEvict := func(s session.Affinity) { a.router.DeleteSession(s) }
	if a.store, err = openStore(cfg, m, onEvict, log); err != nil {
		return nil, err
	}
	a.router = pool.NewRouter(pool.RouterConfig{DefaultModel: cfg.DefaultModel, Aliases: cfg.ModelAliases,
		Retries: cfg.Retries, Count: tokens.Count}, a.pool, a.store, m, log)
	if err := a.setupLogin(m, lookup); err != nil {
		return nil, err
	}
	if err := a.setupBundles(); err != nil {
		return nil, err
	}
	var ready readiness = a.pool
	if clustered {
		cs, ok := a.store.(pool.ClusterStore)
		if !ok {
			return nil, errors.New("clustering needs the Redis store")
		}
		a.cluster = pool.NewCluster(pool.ClusterConfig{ID: replicaID(cfg.ReplicaID), URL: cfg.AdvertiseURL,
			LeaseTTL: cfg.LeaseTTL, MaxAccounts: cfg.MaxAccountsPerReplica}, a.pool, cs, log)
		a.router.SetRemote(a.cluster)
		ready = clusterReadiness{a.pool, a.cluster}
	}
	a.routes(reg, m, ready)
	return a, nil
}

// routes builds the public and admin HTTP surfaces.
func (a *app) routes(reg *prometheus.Registry, m *metrics.Metrics, ready readiness) {
	cfg, log := a.cfg, a.log
	gin.SetMode(gin.ReleaseMode)
	protocols := handlers.Protocols{
		Chat:      openaichat.New(openaichat.Config{}, a.router, log),
		Responses: responses.New(responses.Config{}, a.router, a.store, log),
		Messages:  anthropic.New(anthropic.Config{}, a.router, log),
		Models:    a.router,
	}
	hcfg := handlers.Config{APIKeys: cfg.APIKeys, MaxBodyBytes: cfg.MaxBodyBytes}
	if a.cluster != nil {
		hcfg.ReplicaID, hcfg.ClusterToken = a.cluster.ID(), cfg.ClusterToken
	}
	engine := handlers.New(hcfg, protocols, m, log)
	adm := admin.New(admin.Config{AdminToken: cfg.AdminToken, APIKeys: cfg.APIKeys, MetricsToken: cfg.MetricsToken,
		MetricsPublic: cfg.MetricsPublic}, adminPool{a.pool, ready}, reg, log)
	adm.RegisterProbes(engine)
	a.api = httpServer(cfg.Listen, engine)
	adminEngine := engine
	if cfg.AdminListen != "" {
		adminEngine = gin.New()
		adminEngine.Use(handlers.RequestID(log), handlers.Recover(log))
		adm.RegisterProbes(adminEngine)
		a.admin = httpServer(cfg.AdminListen, adminEngine)
	}
	internal := adm.Register(adminEngine)
	adm.RegisterSession(internal, a.store)
	adm.RegisterStats(internal, admin.Limits{MaxInFlight: cfg.MaxInFlight, MaxQueue: cfg.MaxQueue}, a.pool)
	if a.cluster != nil {
		adm.RegisterCluster(internal, a.cluster)
	}
	var svc admin.LoginService
	if a.login != nil {
		svc = a.login // never a typed nil
	}
	admin.RegisterLogin(internal, svc, a.pool, log)
	adm.RegisterBundles(internal, a.bundles)
	adm.RegisterDashboard(adminEngine)
}

// setupBundles: credentials are restored into an empty work dir before a
// worker starts (from the store, else the account's configured bundle), and
// saved to the store each time an instance becomes ready.
func (a *app) setupBundles() error {
	var key []byte
	if a.cfg.BundleKey != "" {
		k, err := session.ParseKey(a.cfg.BundleKey)
		if err != nil {
			return fmt.Errorf("POOLGATE_BUNDLE_KEY: %w", err)
		}
		key = k
	}
	configured := map[string][]byte{}
	for _, acct := range a.cfg.Accounts {
		b64 := acct.SessionBundle
		if acct.SessionBundleFile != "" {
			raw, err := os.ReadFile(acct.SessionBundleFile)
			if err != nil {
				return fmt.Errorf("account %s: session_bundle_file: %w", acct.Name, err)
			}
			b64 = string(raw)
		}
		if b64 = strings.TrimSpace(b64); b64 == "" {
			continue
		}
		sealed, err := decodeBundle(b64)
		if err != nil {
			return fmt.Errorf("account %s: session_bundle: %w", acct.Name, err)
		}
		configured[acct.Name] = sealed
	}
	if key == nil && len(configured) > 0 {
		return errors.New("accounts carry session bundles but POOLGATE_BUNDLE_KEY is not set")
	}
	a.bundles = bundles.New(bundles.Config{Key: key, Configured: configured}, a.pool, a.store, a.log.With("component", "bundles"))
	a.pool.SetHooks(pool.Hooks{
		PreStart: func(ctx context.Context, t pool.LoginTarget) error {
			_, err := a.bundles.Restore(ctx, t.Account.Name, t.WorkDir)
			return err
		},
		Ready: func(ctx context.Context, t pool.LoginTarget) {
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
	})
	return nil
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
func (a *app) setupLogin(m *metrics.Metrics, getenv func(string) string) error {
	cfg := a.cfg
	recipe := cfg.LoginRecipe
	if recipe == "" {
		recipe = "simworker"
		if cfg.WorkerBin != "" && cfg.Driver == "lingma" {
			recipe = "lingma-alibaba"
		}
	}
	r, err := login.NewRunner(login.Config{Chromium: cfg.Chromium, Concurrency: cfg.LoginConcurrency,
		RecipeFile: cfg.LoginRecipes, DefaultRecipe: recipe, Stealth: cfg.LoginStealth, Getenv: getenv,
		TempDir: filepath.Join(cfg.DataDir, "login-profiles"), Metrics: m}, a.log.With("component", "login"))
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
	if cfg.AutoLogin {
		a.pool.SetLoginer(r)
	}
	return nil
}

// workerEnv is the environment workers inherit: this process's, without
// poolgate's own settings (API keys, tokens and the bundle key stay here).
func workerEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "POOLGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// readiness answers /readyz.
type readiness interface{ Ready() (bool, string) }

// clusterReadiness: a replica is ready when it serves an account itself or
// can forward to a replica with capacity.
type clusterReadiness struct {
	pool    *pool.Pool
	cluster *pool.Cluster
}

func (r clusterReadiness) Ready() (bool, string) {
	ok, why := r.pool.Ready()
	if ok {
		return true, ""
	}
	if _, spare := r.cluster.Spare(); spare {
		return true, ""
	}
	return false, why + "; no other replica has capacity"
}

// adminPool is the pool as admin sees it, with the replica's readiness.
type adminPool struct {
	*pool.Pool
	ready readiness
}

func (p adminPool) Ready() (bool, string) { return p.ready.Ready() }

// replicaID names this process run: the configured name (else the host
// name) plus a random suffix, so a restarted replica never renews its
// predecessor's leases.
func replicaID(name string) string {
	if name == "" {
		name, _ = os.Hostname()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return name + "-" + hex.EncodeToString(b[:])
}

// httpServer sets the timeouts both servers need (STYLE 19); streams set
// their own write deadlines.
func httpServer(addr string, h http.Handler) *http.Server {
	return &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
		MaxHeaderBytes: 1 << 20}
}

func openStore(cfg config.Config, m *metrics.Metrics, onEvict func(session.Affinity), log *slog.Logger) (store, error) {
	mem := session.MemoryConfig{OnEvict: onEvict}
	if cfg.RedisURL == "" {
		return session.NewMemory(mem), nil
	}
	r, err := session.OpenRedis(session.RedisConfig{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Memory: mem, Logger: log,
		OnError: func(op string, _ error) { m.StoreErrors.WithLabelValues(op).Inc() }})
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	return r, nil
}

// workerSetup builds the driver and one worker config per account. With no
// worker binary configured, the pool runs this executable's simworker; with
// no accounts either, two simulated accounts that start logged in.
func workerSetup(cfg config.Config, log *slog.Logger) (pool.Driver, []pool.WorkerConfig, error) {
	// prefix starts the worker binary; extra follows the driver's own
	// arguments (for the openai driver, the whole template is prefix+extra).
	prefix, extra := []string{cfg.WorkerBin}, cfg.WorkerArgs
	accounts := cfg.Accounts
	if cfg.WorkerBin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("find own executable for the simulated workers: %w", err)
		}
		prefix = []string{self, "simworker"}
		if cfg.Driver == "openai" {
			prefix = append(prefix, "start", "--protocol=openai", "--port={port}", "--workDir={workdir}")
		}
		if len(accounts) == 0 {
			accounts = config.DefaultAccounts()
			if cfg.Driver == "lingma" {
				extra = append(extra, "--logged-in")
			}
			log.Info("no accounts configured: serving two simulated accounts (set POOLGATE_ACCOUNTS and POOLGATE_WORKER_BIN for real ones)")
		}
	}
	if len(accounts) == 0 {
		return nil, nil, errors.New("no accounts: set POOLGATE_ACCOUNTS (a JSON list of {name, username, password}) or POOLGATE_ACCOUNTS_FILE")
	}
	var driver pool.Driver
	switch cfg.Driver {
	case "openai":
		template := append(append([]string(nil), prefix...), extra...)
		driver = openaidrv.New(openaidrv.Config{Command: template, APIKey: cfg.WorkerAPIKey, IdleConns: cfg.InstanceMaxInFlight})
	default:
		driver = lingma.New(lingma.Config{Command: prefix, ExtraArgs: extra})
	}
	workers := make([]pool.WorkerConfig, 0, len(accounts))
	for _, acct := range accounts {
		workers = append(workers, pool.WorkerConfig{
			Name:           acct.Name,
			Account:        poolAccount(acct),
			WorkDir:        filepath.Join(cfg.DataDir, "workers", acct.Name),
			MaxInFlight:    cfg.InstanceMaxInFlight,
			StartTimeout:   cfg.StartTimeout,
			HealthInterval: cfg.HealthInterval,
			HealthTimeout:  cfg.HealthTimeout,
			BackoffMax:     cfg.BackoffMax,
			Recipe:         acct.Recipe,
			AutoLogin:      cfg.AutoLogin,
		})
	}
	return driver, workers, nil
}

// poolAccount converts a configured account; the simulator learns the
// account's credentials from SIMWORKER_ACCOUNTS (harmless to real workers).
func poolAccount(acct config.Account) pool.Account {
	env := []string{"SIMWORKER_ACCOUNTS=" + acct.Username + ":" + acct.Password}
	keys := make([]string, 0, len(acct.Env))
	for k := range acct.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+acct.Env[k])
	}
	return pool.Account{Name: acct.Name, Username: acct.Username, Password: acct.Password, Env: env, Args: acct.Args}
}

// run serves until ctx ends, then shuts down: stop accepting, let turns in
// flight finish within the grace period, stop the workers (SIGINT, then
// SIGKILL) and close the store.
func (a *app) run(ctx context.Context) error {
	if len(a.cfg.APIKeys) == 0 {
		a.log.Warn("NO API KEYS SET: anyone who can reach " + a.cfg.Listen + " can use this gateway; set POOLGATE_API_KEYS")
	}
	if a.cfg.AdminToken == "" {
		a.log.Warn("no POOLGATE_ADMIN_TOKEN: the admin API accepts the API keys; set an admin token")
	}
	lis, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.Listen, err)
	}
	var adminLis net.Listener
	if a.admin != nil {
		if adminLis, err = net.Listen("tcp", a.cfg.AdminListen); err != nil {
			lis.Close()
			return fmt.Errorf("admin listen %s: %w", a.cfg.AdminListen, err)
		}
	}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	a.pool.Start(runCtx)
	var bg sync.WaitGroup
	bg.Go(func() { a.store.Run(runCtx) })
	if a.cluster != nil {
		bg.Go(func() { a.cluster.Run(runCtx) })
	}
	errc := make(chan error, 2)
	go func() { errc <- a.api.Serve(lis) }()
	if a.admin != nil {
		go func() { errc <- a.admin.Serve(adminLis) }()
	}
	a.log.Info("poolgate listening", "addr", lis.Addr().String(), "accounts", len(a.pool.Workers()),
		"store", storeName(a.cfg), "admin", strings.TrimSpace(a.cfg.AdminListen))
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	a.log.Info("shutting down", "grace", a.cfg.ShutdownGrace)
	grace, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownGrace)
	defer cancel()
	if a.login != nil {
		a.login.Close() // cancels logins; every browser is gone when it returns
	}
	done := make(chan struct{})
	go func() {
		a.pool.Shutdown(grace)
		close(done)
	}()
	for _, srv := range []*http.Server{a.api, a.admin} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(grace); err != nil {
			srv.Close()
		}
	}
	<-done
	a.launcher.Close() // every worker has exited: the spawner thread may end
	stopRun()
	bg.Wait()
	if a.cluster != nil {
		lctx, lcancel := context.WithTimeout(context.Background(), 3*time.Second)
		a.cluster.Leave(lctx) // workers are stopped: hand the leases over now
		lcancel()
	}
	a.router.Wait()
	_ = a.store.Close()
	a.log.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

func storeName(cfg config.Config) string {
	if cfg.RedisURL != "" {
		return "redis"
	}
	return "memory"
}
