package admin

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"
)

// Reloader re-reads the daemon's configuration and applies what may change
// while it runs (cmd/poolgate/internal/daemon).
type Reloader interface {
	// Reload applies the configuration as it is now and reports what
	// changed. A configuration it refuses is an error wrapping
	// ErrConfigInvalid, and nothing of it was applied.
	Reload() (ReloadReport, error)
}

// ErrConfigInvalid: the new configuration was refused whole; the one in
// force stays.
var ErrConfigInvalid = errors.New("configuration refused")

// ReloadReport is the answer of POST /internal/reload. It names accounts and
// API keys, never a secret.
type ReloadReport struct {
	Applied Applied `json:"applied"`
	// RestartRequired lists the settings (config keys) whose new value
	// differs from the one in force but takes a restart; they were left as
	// they are.
	RestartRequired []string `json:"restart_required"`
}

// Applied is what a reload changed.
type Applied struct {
	Accounts Diff `json:"accounts"`
	APIKeys  Diff `json:"api_keys"`
}

// Diff names what was added, removed and changed, each list in config
// order (never nil, so the JSON always has the three lists).
type Diff struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
}

// RegisterReload adds POST /reload to r, the authenticated /internal group.
// A reload is this replica's alone: in a cluster each replica reloads its
// own configuration (send it to each, or SIGHUP each).
func (a *Admin) RegisterReload(r gin.IRouter, rl Reloader) {
	r.POST("/reload", func(c *gin.Context) {
		rep, err := rl.Reload()
		switch {
		case errors.Is(err, ErrConfigInvalid):
			writeError(c, http.StatusUnprocessableEntity, CodeConfigInvalid, err.Error())
			return
		case err != nil:
			writeError(c, http.StatusInternalServerError, CodeInternal, err.Error())
			return
		}
		a.log.Info("admin action", "action", "reload", "by", who(c))
		c.JSON(http.StatusOK, rep)
	})
}
