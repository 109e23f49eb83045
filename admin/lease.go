package admin

import (
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers"
)

// Holders says which replica drives an account (clustered only).
type Holders interface {
	// Holder reports whether this replica holds the instance's lease and
	// may act on it; otherwise the URL of the replica that does, "" when no
	// replica holds it (or none is known).
	Holder(instance string) (local bool, url string)
	// ID names this replica.
	ID() string
}

// leaseGate carries what the lease check needs.
type leaseGate struct {
	holders Holders
	token   string // the cluster token, sent with a forwarded action
	forward bool   // the holder's advertised URL serves the admin API too
	client  *http.Client
}

// SetCluster makes every action on an instance follow its lease: the lease
// decides who drives an account, so an action (a restart, a drain, a bundle
// import, a login) on a replica that does not hold it is forwarded to the
// holder, or refused with the holder's address. forward says whether the
// replicas' advertised URLs serve the admin API (no separate admin
// listener); else the action is refused.
func (a *Admin) SetCluster(h Holders, clusterToken string, forward bool) {
	a.lease = &leaseGate{holders: h, token: clusterToken, forward: forward,
		client: &http.Client{Timeout: 60 * time.Second}}
}

// maxForwardBody caps what is read of an action's body to forward it (a
// bundle import's cap, with room).
const maxForwardBody = 4 << 20

// leased gates the instance-scoped routes (an :instance path parameter or an
// ?instance= query) on the lease. Routes about no instance pass.
func (a *Admin) leased() gin.HandlerFunc {
	return func(c *gin.Context) {
		g := a.lease
		name := c.Param("instance")
		if name == "" {
			name = c.Query("instance")
		}
		if g == nil || name == "" {
			c.Next()
			return
		}
		local, url := g.holders.Holder(name)
		switch {
		case local:
			c.Next()
			return
		case handlers.Forwarded(c.Request) || url == "":
			// Forwarded here by a replica whose view was stale, or held by no
			// one (it is being handed over, or this replica just started).
			a.refuse(c, name, "no replica holds its lease right now; retry in a few seconds")
			return
		case !g.forward:
			a.refuse(c, name, "it is held by the replica at "+url+"; send the action to that replica's admin API")
			return
		}
		body, err := io.ReadAll(io.LimitReader(c.Request.Body, maxForwardBody))
		if err != nil {
			handlers.WriteError(c.Writer, c.Request, http.StatusBadRequest, "read body: "+err.Error())
			c.Abort()
			return
		}
		a.log.Info("admin action forwarded to the lease holder", "instance", name, "path", c.Request.URL.Path,
			"holder", url, "by", c.GetString(whoKey))
		if err := handlers.Proxy(c.Request.Context(), g.client, c.Writer, c.Request, url, body, g.holders.ID(), g.token); err != nil {
			a.refuse(c, name, "its holder at "+url+" could not be reached: "+err.Error())
			return
		}
		c.Abort()
	}
}

func (a *Admin) refuse(c *gin.Context, name, why string) {
	a.log.Warn("admin action refused: this replica does not hold the lease", "instance", name,
		"path", c.Request.URL.Path, "why", why)
	handlers.WriteError(c.Writer, c.Request, http.StatusConflict, "this replica does not drive "+name+": "+why)
	c.Abort()
}
