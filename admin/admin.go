// Package admin is poolgate's operator surface: health and readiness probes,
// the admin API under /internal with its own error shape (errors.go), the
// Prometheus endpoint and the dashboard. It reads and steers the admission
// room, the supervisor, the login runner, the bundle service and the
// cluster through small interfaces of its own; it must not import the
// protocol handlers, nor speak a chat protocol.
package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Config configures the admin surface. Who may call each of its routes is
// decided before they run, at the edge (internal/access); the handlers read
// the caller it established.
type Config struct {
	// BundleImportPlain accepts unsealed bundles on import (the Python
	// gateway's exports). Default off.
	BundleImportPlain bool
	// BundleExportPlain answers session exports unsealed, in the Python
	// gateway's form, to move a login back to it. Default off.
	BundleExportPlain bool
	// Simulated says the bundled simulator serves the pool: /healthz,
	// /internal/stats and the dashboard say so.
	Simulated bool
	// Cluster, on a replica of a cluster, makes every action on an
	// instance follow its lease (lease.go); nil: not clustered, every
	// instance is this replica's.
	Cluster *ClusterConfig
	// Owners makes the digests the edge names a key's conversations by,
	// for a flush of one key's affinity (nil: unkeyed, as a default edge).
	Owners *access.Owners
}

// maxAdminBody caps admin request bodies but a streamed plain import's.
const maxAdminBody = 4 << 20

// bodyCap is a request's body cap: a plain bundle imported into the
// instance the query names may be as large as a plain bundle may be
// (importstream.go).
func (a *Admin) bodyCap(c *gin.Context) int64 {
	if a.cfg.BundleImportPlain && c.Request.Method == http.MethodPost && c.FullPath() == "/internal/session/import" &&
		c.Query("instance") != "" {
		return maxPlainImportBody
	}
	return maxAdminBody
}

// Pool is what admin reads and steers of the admission room (*route.Pool).
type Pool interface {
	Snapshot() route.Snapshot
	Ready() (bool, string)
	// Probe sends the instance one short turn, cooldown or not, and acts on
	// the answer (route.ErrBusy when it cannot take one now).
	Probe(ctx context.Context, name string) (route.ProbeResult, error)
	// ClearCooldown ends the instance's cooldown now; false: it had none
	// (supervisor.ErrUnknownInstance for a name it does not know).
	ClearCooldown(name string) (bool, error)
}

// Workers is what admin steers of the supervisor (*supervisor.Supervisor);
// each returns supervisor.ErrUnknownInstance for a name it does not know.
type Workers interface {
	Restart(name string) error
	Drain(name string) error
}

// Admin serves the operator endpoints.
type Admin struct {
	cfg     Config
	pool    Pool
	workers Workers
	reg     *prometheus.Registry
	log     *slog.Logger
	lease   *leaseGate // nil: not clustered, every instance is this replica's
}

// New returns the admin surface. reg is the registry the daemon made; New adds the
// pool's scrape-time collector to it.
func New(cfg Config, p Pool, w Workers, reg *prometheus.Registry, log *slog.Logger) *Admin {
	reg.MustRegister(newPoolCollector(p))
	a := &Admin{cfg: cfg, pool: p, workers: w, reg: reg, log: log}
	if c := cfg.Cluster; c != nil {
		a.lease = &leaseGate{holders: c.Holders, forward: c.Forward, hop: c.Hop}
	}
	return a
}

// health is the answer of /healthz: the process is alive (always 200), with
// the Python gateway's pool summary beside it.
type health struct {
	Status string `json:"status"`
	// OK: some instance is ready (the Python gateway's field; /readyz
	// answers the same with its status code).
	OK bool `json:"ok"`
	// Reason says why no instance is ready, or how many failed for good
	// (a worker that failed to start the same way again and again waits
	// for a restart): "" when every instance is fine.
	Reason    string `json:"reason,omitempty"`
	Time      int64  `json:"time"`
	PoolSize  int    `json:"pool_size"`
	PoolReady int    `json:"pool_ready"`
	// Simulated: the bundled simulator serves the pool, not a real model.
	Simulated bool `json:"simulated"`
	// Instances are shown to admin callers only (their names may be
	// account names): a probe needs no credentials.
	Instances []healthInstance `json:"instances,omitempty"`
}

type healthInstance struct {
	Name     string           `json:"name"`
	State    supervisor.State `json:"state"`
	InFlight int              `json:"in_flight"`
	// LastError says why the instance is not ready (a failed one: why it
	// failed).
	LastError string `json:"last_error,omitempty"`
}

func (a *Admin) health(c *gin.Context) {
	snap := a.pool.Snapshot()
	h := health{Status: "ok", Time: time.Now().Unix(), PoolSize: len(snap.Instances), Simulated: a.cfg.Simulated}
	failed := 0
	for _, in := range snap.Instances {
		switch in.State {
		case supervisor.StateReady:
			h.PoolReady++
		case supervisor.StateFailed:
			failed++
		}
	}
	h.OK = h.PoolReady > 0
	switch {
	case !h.OK:
		_, h.Reason = a.pool.Ready()
	case failed > 0:
		h.Reason = strconv.Itoa(failed) + " of " + strconv.Itoa(len(snap.Instances)) + " instances failed"
	}
	if access.From(c.Request.Context()).SeesAll() {
		h.Instances = make([]healthInstance, 0, len(snap.Instances))
		for _, in := range snap.Instances {
			h.Instances = append(h.Instances, healthInstance{Name: in.Name, State: in.State, InFlight: in.InFlight,
				LastError: in.LastError})
		}
	}
	c.JSON(http.StatusOK, h)
}

// RegisterProbes adds /healthz and /readyz (no credentials) to r.
func (a *Admin) RegisterProbes(r gin.IRouter) {
	r.GET("/healthz", a.health)
	r.GET("/readyz", func(c *gin.Context) {
		if ok, why := a.pool.Ready(); !ok {
			c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "reason": why})
			return
		}
		c.JSON(http.StatusOK, gin.H{"status": "ready"})
	})
}

// Register adds /metrics and the /internal API to r; it returns the
// authenticated /internal group for the other admin endpoints.
func (a *Admin) Register(r gin.IRouter) gin.IRouter {
	metrics := promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg})
	r.GET("/metrics", gin.WrapH(metrics))

	in := r.Group("/internal", bodyLimit(a.bodyCap), a.pickInstance(), a.leased())
	in.GET("/pool", func(c *gin.Context) { c.JSON(http.StatusOK, a.pool.Snapshot()) })
	in.POST("/pool/:instance/restart", a.poolAction("restart", a.workers.Restart))
	in.POST("/pool/:instance/drain", a.poolAction("drain", a.workers.Drain))
	in.POST("/pool/:instance/cooldown/clear", a.clearCooldown)
	in.POST("/pool/:instance/probe", a.probe)
	return in
}

func (a *Admin) clearCooldown(c *gin.Context) {
	name := instanceParam(c)
	had, err := a.pool.ClearCooldown(name)
	if err != nil {
		writePoolError(c, name, err)
		return
	}
	a.log.Info("admin action", "action", "clear_cooldown", "instance", name, "had_cooldown", had, "by", who(c))
	c.JSON(http.StatusOK, gin.H{"instance": name, "had_cooldown": had})
}

// probeTimeout bounds a probe turn from the admin API.
const probeTimeout = 90 * time.Second

func (a *Admin) probe(c *gin.Context) {
	name := instanceParam(c)
	ctx, cancel := context.WithTimeout(c.Request.Context(), probeTimeout)
	defer cancel()
	res, err := a.pool.Probe(ctx, name)
	if err != nil {
		writePoolError(c, name, err)
		return
	}
	a.log.Info("admin action", "action", "probe", "instance", name, "ok", res.OK, "latency_ms", res.LatencyMS,
		"error", res.Error, "by", who(c))
	c.JSON(http.StatusOK, res)
}

// writePoolError answers a pool action's error: 404 for an unknown
// instance, 409 for one that can't take the action now.
func writePoolError(c *gin.Context, name string, err error) {
	switch {
	case errors.Is(err, supervisor.ErrUnknownInstance):
		writeError(c, http.StatusNotFound, CodeUnknownInstance, "unknown instance "+name)
	case errors.Is(err, route.ErrBusy):
		writeError(c, http.StatusConflict, CodeBusy, err.Error())
	case errors.Is(err, cluster.ErrNotHolder):
		writeError(c, http.StatusConflict, CodeNotLeaseHolder, err.Error())
	default:
		writeError(c, http.StatusInternalServerError, CodeInternal, err.Error())
	}
}

func (a *Admin) poolAction(what string, do func(string) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		name := instanceParam(c)
		if err := do(name); err != nil {
			writePoolError(c, name, err)
			return
		}
		a.log.Info("admin action", "action", what, "instance", name, "by", who(c))
		c.JSON(http.StatusAccepted, gin.H{"instance": name, "action": what})
	}
}

// who names the caller that acted, for the admin log: the key's name or the
// token's kind, never a secret.
func who(c *gin.Context) string { return access.From(c.Request.Context()).Name() }
