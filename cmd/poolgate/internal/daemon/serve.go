package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/live"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/telemetry/otelenv"
	"github.com/poolgate/poolgate/internal/tokens"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session"
	"github.com/poolgate/poolgate/session/bundle"
)

// serve runs the daemon. environ returns the process environment, read
// again at each reload; hup delivers SIGHUP (nil: none).
func serve(ctx context.Context, opts Options, environ func() []string, hup <-chan os.Signal, stderr io.Writer) error {
	if opts.EnvFile != "" {
		vars, err := config.ReadEnvFile(opts.EnvFile)
		if err != nil {
			return err
		}
		base := environ
		environ = func() []string { return append(append([]string(nil), vars...), base()...) }
	}
	cfg, warnings, err := config.Load(opts.ConfigPath, environ(), pycompat.ReadSettings)
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
	app, err := build(cfg, log, environ())
	if err != nil {
		return err
	}
	app.cfgPath, app.environ, app.hup = opts.ConfigPath, environ, hup
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
	cfg         config.Config
	log         *slog.Logger
	kind        worker.Kind    // the top-level driver's registration
	drivers     *workerDrivers // every account's driver, by kind and binary
	sup         *supervisor.Supervisor
	pool        *route.Pool
	launcher    *supervisor.ExecLauncher
	router      *route.Router
	cluster     *cluster.Cluster // nil on a single node
	hop         *cluster.Proxy   // the one hop between replicas, for API turns and admin actions; nil on a single node
	login       *login.Runner    // nil without Chromium
	bundles     *bundle.Service
	store       store        // conversation state
	bundleStore bundle.Store // sealed bundles, beside it
	api         *http.Server
	admin       *http.Server   // nil when admin shares the API listener
	conns       *httpx.Conns   // the bounds of both listeners' connections
	owners      *access.Owners // the keyed digests of the callers' keys
	apiConns    *httpx.ConnGuard
	adminConns  *httpx.ConnGuard // nil with admin
	keys        *apikey.Registry
	acct        *accounting
	metrics     *metrics.Metrics
	live        *live.Recorder              // the dashboard's last hour
	tracing     trace.TracerProvider        // a no-op one when tracing is off
	stopTracing func(context.Context) error // flushes the spans not yet exported
	count       *tokens.Memo                // the token counter of the router and the handlers
	compat      compat                      // the Python gateway's compatibility (pycompat.go)

	// Reloads (reload.go): the config file and the environment to read
	// again, and the configuration in force, which only a reload changes.
	cfgPath  string
	environ  func() []string
	hup      <-chan os.Signal // SIGHUP; nil: reloads only by the admin API
	reloadMu sync.Mutex
	applied  config.Config

	// plainBundles are the accounts' plain session bundles, by account
	// name, installed before a start into an empty work dir; a reload
	// replaces the map.
	plainBundles atomic.Pointer[map[string]plainbundle.Bundle]
}

// store is what the daemon needs of a session store beyond what its users need.
type store interface {
	route.AffinityStore
	responses.Store
	admin.AffinityFlusher
	Run(ctx context.Context)
	Close() error
}

func build(cfg config.Config, log *slog.Logger, environ []string) (*app, error) {
	lookup := getenv(environ)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)

	adoptWorkDirs(cfg, log)
	drivers := newWorkerDrivers(cfg, log)
	kind, workers, err := workerSetup(cfg, drivers, log)
	if err != nil {
		return nil, err
	}
	tp, stopTracing, err := otelenv.FromEnv(lookup, log)
	if err != nil {
		return nil, err
	}
	clustered := cfg.AdvertiseURL != ""
	a := &app{cfg: cfg, applied: cfg, kind: kind, drivers: drivers, compat: compat{on: cfg.PythonCompat}, metrics: m, log: log,
		launcher: &supervisor.ExecLauncher{Env: childEnv(environ)}, tracing: tp, stopTracing: stopTracing,
		live: live.New(liveStep, liveSteps, liveAccounts), count: tokens.NewMemo()}
	if err := a.setupLogin(m, lookup, childEnv(environ)); err != nil {
		return nil, err
	}
	key, err := ownerKey(cfg, log)
	if err != nil {
		return nil, err
	}
	a.owners = access.NewOwners(key)
	// The pool is made first and given to the supervisor; the supervisor's
	// logins on a replica go through the cluster's gate, given to the
	// cluster when it is made (it drives the supervisor's workers).
	a.pool = route.New(route.Config{MaxInFlight: cfg.MaxInFlight, MaxQueue: cfg.MaxQueue, QueueTimeout: cfg.QueueTimeout},
		m, log)
	var loginer supervisor.Loginer
	var gate *cluster.LoginGate
	if a.login != nil && cfg.AutoLogin {
		loginer = a.login
		if clustered {
			// Logins only for the accounts this replica keeps: a hand-over
			// would cut one halfway.
			gate = cluster.NewLoginGate(a.login)
			loginer = gate
		}
	}
	a.sup = supervisor.New(a.pool.Watch(supervisor.Config{Hooks: a.bundleHooks(), Loginer: loginer}), workers,
		a.launcher, m, log)
	onEvict := func(s route.Affinity) { a.router.DeleteSession(s) }
	var redisClient redis.UniversalClient
	if a.store, a.bundleStore, redisClient, err = openStores(cfg, m, onEvict, log); err != nil {
		return nil, err
	}
	if redisClient != nil {
		if err := otelenv.TraceRedis(redisClient, tp); err != nil {
			return nil, fmt.Errorf("redis tracing: %w", err)
		}
	}
	var conn *redisconn.Conn // the session store's: the accounting stores share its health
	if r, ok := a.store.(*session.Redis); ok {
		conn = r.Conn()
	}
	a.acct = newAccounting(cfg, conn, m, log)
	a.keys = apikey.NewRegistry(keysOf(cfg))
	m.InitKeys(a.keys.Load().Names())
	if err := a.setupBundles(); err != nil {
		return nil, err
	}
	var ready readiness = a.pool
	var remote route.Remote // nil: not clustered
	if clustered {
		if redisClient == nil {
			return nil, errors.New("clustering needs the Redis store")
		}
		leases := cluster.NewRedisStore(cluster.RedisConfig{Prefix: cfg.RedisPrefix}, redisClient)
		a.cluster = cluster.New(cluster.Config{ID: replicaID(cfg.ReplicaID), URL: cfg.AdvertiseURL,
			LeaseTTL: cfg.LeaseTTL, MaxAccounts: cfg.MaxAccountsPerReplica, Logins: gate}, a.sup, a.pool, leases, m, log)
		if a.hop, err = newHop(cfg, a.cluster.ID(), a.tracing); err != nil {
			return nil, err
		}
		a.sup.SubscribeMembers(a.cluster) // after the pool: a new member exists before it is fenced
		ready, remote = clusterReadiness{a.pool, a.cluster}, a.cluster
	}
	var affinity route.AffinityStore = a.store
	if !cfg.SessionReuse {
		affinity = nil // every turn starts an upstream session of its own
	}
	// Each kind's bound on a turn is its workers' driver's, which the
	// router asks of the kinds a turn may go to.
	a.router = route.NewRouter(route.RouterConfig{DefaultModel: cfg.DefaultModel, DefaultNames: cfg.DefaultModelNames,
		Aliases: cfg.ModelAliases, Retries: cfg.Retries, Count: a.count.Count, Tools: toolPolicy(cfg), Tracing: tp,
		ConversationKey: namesKey(cfg), KindAgentModels: agentModels(), Remote: remote},
		a.pool, affinity, m, log)
	a.routes(reg, m, ready)
	return a, nil
}

// responseStore is the session store as the responses handler sees it: an
// unknown id is responses.ErrNotFound there, session.ErrNotFound here.
type responseStore struct{ responses.Store }

func (s responseStore) LoadResponse(ctx context.Context, id string) ([]byte, error) {
	data, err := s.Store.LoadResponse(ctx, id)
	return data, notFound(err)
}

func (s responseStore) DeleteResponse(ctx context.Context, id string) error {
	return notFound(s.Store.DeleteResponse(ctx, id))
}

func notFound(err error) error {
	if errors.Is(err, session.ErrNotFound) {
		return fmt.Errorf("%w: %w", responses.ErrNotFound, err)
	}
	return err
}

// routes builds the public and admin HTTP surfaces.
func (a *app) routes(reg *prometheus.Registry, m *metrics.Metrics, ready readiness) {
	cfg, log := a.cfg, a.log
	apis := protocols.Table(protocols.Config{Options: relay.Options{KeepAlive: cfg.StreamKeepAlive, CountDropped: m.CountFieldIgnored},
		Responses: responseStore{a.store}, Count: a.count.Count, Compat: a.compat.protocols()}, log)
	// Who may call what: decided once, at the edge of every listener, from
	// these credentials (the keys swapped by a reload).
	creds := &access.Credentials{Keys: a.keys, AdminToken: cfg.AdminToken, MetricsToken: cfg.MetricsToken,
		MetricsPublic: cfg.MetricsPublic, Owners: a.owners}
	hcfg := handlers.Config{Credentials: creds, AdminError: admin.WriteError,
		Accounting: a.acct.forHTTP(cfg.RequestLogDebug, a.live), MaxBodyBytes: cfg.MaxBodyBytes,
		BodyBudget: newBodyBudget(cfg, m, log),
		Insecure:   cfg.Insecure, Tracing: a.tracing, Router: a.router, Models: a.router}
	var workers admin.Workers = a.sup
	acfg := admin.Config{BundleImportPlain: cfg.BundleImportPlain, BundleExportPlain: cfg.BundleExportPlain,
		Simulated: cfg.Simulated(), Owners: a.owners}
	if a.cluster != nil {
		creds.Hops, hcfg.Hop = a.hop.Hops, a.hop
		workers = leasedWorkers{a.sup, a.cluster}
		// The advertised URL serves the admin API unless it has a listener
		// of its own, whose address no replica knows.
		acfg.Cluster = &admin.ClusterConfig{Holders: a.cluster, Hop: a.hop, Forward: cfg.AdminListen == ""}
	}
	a.conns = newConns(cfg, m, log)
	engine := handlers.New(hcfg, apis, m, log)
	adm := admin.New(acfg, adminPool{a.pool, ready}, workers, reg, log)
	adm.RegisterProbes(engine)
	a.api, a.apiConns = a.httpServer(cfg.Listen, a.compat.errors(engine))
	adminEngine := engine
	if cfg.AdminListen != "" {
		var open func() bool
		if cfg.AdminToken == "" {
			// Open on loopback while no API key is set (the config refuses
			// anything else).
			open = func() bool { return a.keys.Load().Len() == 0 }
		}
		adminEngine = handlers.NewAdmin(creds, admin.WriteError, log, open)
		adm.RegisterProbes(adminEngine)
		a.admin, a.adminConns = a.httpServer(cfg.AdminListen, a.compat.errors(adminEngine))
	}
	internal := adm.Register(adminEngine)
	adm.RegisterSession(internal, a.store)
	adm.RegisterStats(internal, admin.Limits{MaxInFlight: cfg.MaxInFlight, MaxQueue: cfg.MaxQueue}, a.sup)
	if a.cluster != nil {
		adm.RegisterCluster(internal, a.cluster)
	}
	var svc admin.LoginService
	if a.login != nil {
		svc = a.login // never a typed nil
	}
	admin.RegisterLogin(internal, svc, a.sup, a.compat.logins(svc, a.sup), log)
	adm.RegisterBundles(internal, a.bundles)
	adm.RegisterUsage(internal, a.acct.usage, a.acct.requests)
	adm.RegisterLive(internal, a.live)
	adm.RegisterReload(internal, a)
	adm.RegisterDashboard(adminEngine)
}

// inheritedEnv are the variables a child process (a worker, or Chromium
// for a login) gets from poolgate's environment: where things are, the
// locale and time zone, the proxies and CA certificates it needs to reach its
// upstream. Nothing else leaves poolgate: not its API keys, admin or cluster
// tokens, bundle key, nor any account's password variable. A worker gets its
// own account's variables on top (WorkerConfig.Account.Env).
var inheritedEnv = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "SHELL": true, "TMPDIR": true, "TZ": true,
	"LANG": true, "LANGUAGE": true, "TERM": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "ALL_PROXY": true,
	"http_proxy": true, "https_proxy": true, "no_proxy": true, "all_proxy": true,
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
	"XDG_RUNTIME_DIR": true, "DISPLAY": true, "WAYLAND_DISPLAY": true, "XAUTHORITY": true,
}

// childEnv filters environ down to inheritedEnv (and the LC_* locale).
func childEnv(environ []string) []string {
	out := make([]string, 0, 16)
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && (inheritedEnv[k] || strings.HasPrefix(k, "LC_")) {
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
	pool    *route.Pool
	cluster *cluster.Cluster
}

func (r clusterReadiness) Ready() (bool, string) {
	ok, why := r.pool.Ready()
	if ok {
		return true, ""
	}
	if _, spare := r.cluster.Spare(""); spare {
		return true, ""
	}
	return false, why + "; no other replica has capacity"
}

// leasedWorkers is the supervisor as the admin API steers it on a replica
// of a cluster: a restart starts a worker, which only the holder of the
// account's lease may run, so it is refused for any other account, whatever
// route asked for it (the admin API forwards such actions to the holder
// before they get here).
type leasedWorkers struct {
	*supervisor.Supervisor
	cluster *cluster.Cluster
}

func (w leasedWorkers) Restart(name string) error {
	if err := held(w.cluster, name); err != nil {
		return err
	}
	return w.Supervisor.Restart(name)
}

// held is nil when this replica holds the account's lease.
func held(c *cluster.Cluster, name string) error {
	if local, _ := c.Holder(name); !local {
		return fmt.Errorf("instance %s: %w", name, cluster.ErrNotHolder)
	}
	return nil
}

// adminPool is the pool as admin sees it, with the replica's readiness.
type adminPool struct {
	*route.Pool
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

// httpServer sets the bounds both servers need, all of them before any
// middleware decides who is calling: a slow client can't hold a connection
// with headers that never end, a body that never arrives, an answer it
// never reads (every write has a deadline, httpx.Conns), nor an idle one
// forever; connections are limited in number, in all, per key and before
// they showed a credential (the guard, which serve wraps the listener in).
// No server-wide write timeout: streams set their own write deadlines.
func (a *app) httpServer(addr string, h http.Handler) (*http.Server, *httpx.ConnGuard) {
	conns := a.conns.Guard()
	return &http.Server{Addr: addr, Handler: httpx.Deadlines(h, a.cfg.BodyTimeout), ReadHeaderTimeout: headerTimeout,
		IdleTimeout: 120 * time.Second, MaxHeaderBytes: 1 << 20, ConnContext: conns.ConnContext}, conns
}

// headerTimeout bounds a request's headers, on every listener.
const headerTimeout = 10 * time.Second

// run serves until ctx ends, then shuts down: stop accepting, let turns in
// flight finish within the grace period, stop the workers (SIGINT, then
// SIGKILL) and close the store.
func (a *app) run(ctx context.Context) error {
	if len(a.cfg.APIKeys) == 0 {
		a.log.Warn("NO API KEYS SET: anyone who can reach " + a.cfg.Listen + " can use this gateway; set POOLGATE_API_KEYS")
	}
	if a.cfg.AdminToken == "" && len(a.cfg.APIKeys) > 0 && !a.cfg.APIKeys.AdminKeys() {
		a.log.Warn("no admin credential: the admin API answers 403 to every caller; set POOLGATE_ADMIN_TOKEN, or give an api_keys entry role: admin")
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
	a.sup.Start(runCtx)
	var bg sync.WaitGroup
	bg.Go(func() { a.store.Run(runCtx) })
	bg.Go(func() { a.acct.run(runCtx) })
	if !a.cfg.RequestLogDebug {
		bg.Go(func() { a.acct.scrub(runCtx, a.log) })
	}
	if a.cluster != nil {
		bg.Go(func() { a.cluster.Run(runCtx) })
	}
	bg.Go(func() { a.sampleLive(runCtx) })
	if a.cfg.PprofListen != "" {
		stopProf, err := servePprof(a.cfg.PprofListen)
		if err != nil {
			return err
		}
		defer stopProf()
	}
	errc := make(chan error, 2)
	go func() { errc <- a.api.Serve(a.apiConns.Listen(lis)) }()
	if a.admin != nil {
		go func() { errc <- a.admin.Serve(a.adminConns.Listen(adminLis)) }()
	}
	a.log.Info("poolgate listening", "addr", lis.Addr().String(), "accounts", a.pool.Size(),
		"store", storeName(a.cfg), "admin", strings.TrimSpace(a.cfg.AdminListen), "simulated", a.cfg.Simulated())
	serveErr := a.serveUntil(ctx, errc)
	a.log.Info("shutting down", "grace", a.cfg.ShutdownGrace)
	grace, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownGrace)
	defer cancel()
	if a.login != nil {
		a.login.Close() // cancels logins; every browser is gone when it returns
	}
	done := make(chan struct{})
	go func() {
		a.pool.Shutdown(grace) // turns in flight finish within the grace
		a.sup.Shutdown()
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
	a.acct.close() // every request is over: flush its records
	tctx, tcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := a.stopTracing(tctx); err != nil {
		a.log.Warn("tracing: spans not exported at shutdown", "err", err)
	}
	tcancel()
	_ = a.store.Close()
	a.log.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}

// servePprof serves Go's profiler on addr, which Validate has held to
// loopback: it carries no credentials. Its own mux keeps the handlers off
// every other listener. The returned func closes it.
func servePprof(addr string) (func(), error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// Loopback keeps other machines out; the Host and Origin checks keep
	// out the web pages a browser on this machine opens (DNS rebinding, a
	// cross-origin request), which could otherwise read the profiles.
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !handlers.LoopbackHost(r.Host) || r.Header.Get("Origin") != "" || !handlers.SameOrigin(r) {
			admin.WriteError(w, http.StatusForbidden, admin.CodeForbidden,
				"the profiler answers only loopback host names, and no web page")
			return
		}
		mux.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: httpx.Deadlines(guard, time.Minute), ReadHeaderTimeout: headerTimeout}
	go func() { _ = srv.Serve(lis) }()
	return func() { _ = srv.Close() }, nil
}

// serveUntil waits for ctx to end or a server to fail, reloading the
// configuration at each SIGHUP meanwhile (one at a time, in this loop).
func (a *app) serveUntil(ctx context.Context, errc <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-a.hup:
			a.onSignal()
		}
	}
}

func storeName(cfg config.Config) string {
	if cfg.RedisURL != "" {
		return "redis"
	}
	return "memory"
}
