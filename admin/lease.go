package admin

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/pool/cluster"
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
	forward bool // the holder's advertised URL serves the admin API too
	hop     *cluster.Proxy
}

// ClusterConfig makes every action on an instance follow its lease: the
// lease decides who drives an account, so an action (a restart, a drain, a
// bundle import, a login) on a replica that does not hold it is forwarded to
// the holder, or refused with the holder's address.
type ClusterConfig struct {
	Holders Holders
	// Hop carries a forwarded action to the holder.
	Hop *cluster.Proxy
	// Forward says whether the replicas' advertised URLs serve the admin
	// API (no separate admin listener); else the action is refused.
	Forward bool
}

// forwardTimeout bounds a forwarded action, the holder's answer included.
const forwardTimeout = 60 * time.Second

// leased gates the instance-scoped routes (an :instance path parameter or an
// ?instance= query) on the lease. Routes about no instance pass; a route
// whose instance is named in its body (a bundle import) calls onHolder
// itself once it has read the name.
func (a *Admin) leased() gin.HandlerFunc {
	return func(c *gin.Context) {
		if name := instanceParam(c); name == "" || a.onHolder(c, name) {
			c.Next()
			return
		}
		c.Abort()
	}
}

// instanceParam is the instance a request names in its path or query, or
// the one picked for it (pick.go): what every instance-scoped handler acts
// on, and what the lease is checked for.
func instanceParam(c *gin.Context) string {
	if name := c.Param("instance"); name != "" {
		return name
	}
	// The picked name is in the query too (for a holder the request is
	// forwarded to), but gin caches the query at its first read, before the
	// pick: here it is read from the pick.
	if name := c.GetString(pickedKey); name != "" {
		return name
	}
	return c.Query("instance")
}

// onHolder reports whether this replica may act on the instance now; if
// not, it has answered the request: forwarded to the holder (the request's
// body must still be unread, or put back), or refused with the holder's
// address.
func (a *Admin) onHolder(c *gin.Context, name string) bool {
	g := a.lease
	if g == nil {
		return true
	}
	local, holder := g.holders.Holder(name)
	switch {
	case local:
		return true
	case access.From(c.Request.Context()).Replica != "" || holder == "":
		// Forwarded here by a replica whose view was stale, or held by no
		// one (it is being handed over, or this replica just started).
		a.refuse(c, name, "no replica holds its lease right now; retry in a few seconds")
		return false
	case !g.forward:
		a.refuse(c, name, "it is held by the replica at "+holder+"; send the action to that replica's admin API")
		return false
	}
	if _, err := url.Parse(holder); err != nil {
		a.refuse(c, name, "its holder's address "+holder+" is not a URL: "+err.Error())
		return false
	}
	a.log.Info("admin action forwarded to the lease holder", "instance", name, "path", c.Request.URL.Path,
		"holder", holder, "by", who(c))
	g.forwardTo(c, holder, func(err error) {
		a.refuse(c, name, "its holder at "+holder+" could not be reached: "+err.Error())
	})
	return false
}

// forwardTo relays the action to the replica at holder, as a hop signed by
// this one (the caller, never its credential), and streams its answer
// back; unreachable, when nothing was written yet, says why. The body is
// read whole first: its digest is part of the signature.
func (g *leaseGate) forwardTo(c *gin.Context, holder string, unreachable func(error)) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), forwardTimeout)
	defer cancel()
	body, err := access.ReadHopBody(c.Request.Body, access.MaxHopBody)
	if err != nil {
		writeBodyError(c, err, "request body over its cap")
		return
	}
	defer body.Close()
	err = g.hop.Forward(ctx, c.Writer, c.Request, body, holder)
	if err != nil && !c.Writer.Written() {
		unreachable(err)
	}
}

func (a *Admin) refuse(c *gin.Context, name, why string) {
	a.log.Warn("admin action refused: this replica does not hold the lease", "instance", name,
		"path", c.Request.URL.Path, "why", why)
	abortWith(c, http.StatusConflict, CodeNotLeaseHolder, "this replica does not drive "+name+": "+why)
}
