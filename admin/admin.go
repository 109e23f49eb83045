// Package admin is poolgate's operator surface: health and readiness probes,
// the admin API under /internal, the Prometheus endpoint and the dashboard.
// It reads and steers the pool through small interfaces; protocol logic
// stays in handlers.
package admin

import (
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/pool"
)

// Config configures the admin surface.
type Config struct {
	// AdminToken guards /internal/*; when empty the API keys are accepted
	// instead (main warns loudly about that).
	AdminToken string
	// APIKeys are the public API keys (the fallback above).
	APIKeys []string
	// MetricsToken guards /metrics unless MetricsPublic.
	MetricsToken  string
	MetricsPublic bool
	// BodyTimeout bounds how long a request body may take to arrive
	// (default 60s).
	BodyTimeout time.Duration
}

// maxAdminBody caps admin request bodies (a bundle import is the largest).
const maxAdminBody = 4 << 20

// Pool is what admin needs of the pool.
type Pool interface {
	Snapshot() pool.Snapshot
	Ready() (bool, string)
	Restart(name string) error
	Drain(name string) error
}

// Admin serves the operator endpoints.
type Admin struct {
	cfg   Config
	pool  Pool
	reg   *prometheus.Registry
	log   *slog.Logger
	lease *leaseGate // nil: not clustered, every instance is this replica's
}

// New returns the admin surface. reg is the registry main made; New adds the
// pool's scrape-time collector to it.
func New(cfg Config, p Pool, reg *prometheus.Registry, log *slog.Logger) *Admin {
	reg.MustRegister(newPoolCollector(p))
	return &Admin{cfg: cfg, pool: p, reg: reg, log: log}
}

// RegisterProbes adds /healthz and /readyz (no credentials) to r.
func (a *Admin) RegisterProbes(r gin.IRouter) {
	r.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
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
	r.GET("/metrics", a.metricsAuth(), gin.WrapH(metrics))

	timeout := a.cfg.BodyTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	in := r.Group("/internal", handlers.BodyCap(maxAdminBody, timeout), a.adminAuth(), a.leased())
	in.GET("/pool", func(c *gin.Context) { c.JSON(http.StatusOK, a.pool.Snapshot()) })
	in.POST("/pool/:instance/restart", a.poolAction("restart", a.pool.Restart))
	in.POST("/pool/:instance/drain", a.poolAction("drain", a.pool.Drain))
	return in
}

func (a *Admin) poolAction(what string, do func(string) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		name := c.Param("instance")
		if err := do(name); err != nil {
			if errors.Is(err, pool.ErrUnknownInstance) {
				handlers.WriteError(c.Writer, c.Request, http.StatusNotFound, "unknown instance "+name)
				return
			}
			handlers.WriteError(c.Writer, c.Request, http.StatusInternalServerError, err.Error())
			return
		}
		a.log.Info("admin action", "action", what, "instance", name, "by", c.GetString(whoKey))
		c.JSON(http.StatusAccepted, gin.H{"instance": name, "action": what})
	}
}

const whoKey = "admin_who"

// adminAuth accepts the admin token; only when none is set, an API key.
func (a *Admin) adminAuth() gin.HandlerFunc {
	return func(c *gin.Context) {
		key := handlers.CallerKey(c.Request)
		switch {
		case a.cfg.AdminToken != "":
			if handlers.MatchKey(key, []string{a.cfg.AdminToken}) {
				c.Set(whoKey, "admin-token")
				c.Next()
				return
			}
		case len(a.cfg.APIKeys) == 0:
			c.Set(whoKey, "loopback")
			c.Next()
			return
		case handlers.MatchKey(key, a.cfg.APIKeys):
			c.Set(whoKey, "api-key")
			c.Next()
			return
		}
		handlers.WriteError(c.Writer, c.Request, http.StatusUnauthorized, "admin token required")
		c.Abort()
	}
}

// metricsAuth: the metrics token when one is set (nothing else is enough);
// without one, whatever the admin API accepts; nothing with
// POOLGATE_METRICS_PUBLIC.
func (a *Admin) metricsAuth() gin.HandlerFunc {
	admin := a.adminAuth()
	return func(c *gin.Context) {
		switch {
		case a.cfg.MetricsPublic:
			c.Next()
		case a.cfg.MetricsToken == "":
			admin(c)
		case handlers.MatchKey(handlers.CallerKey(c.Request), []string{a.cfg.MetricsToken}):
			c.Next()
		default:
			handlers.WriteError(c.Writer, c.Request, http.StatusUnauthorized, "metrics token required")
			c.Abort()
		}
	}
}
