package admin

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// The Python gateway's auto-login start, session export and raw models
// took an optional ?instance= and picked one themselves without it; the
// scripts written for it call them bare. poolgate does the same, before
// the lease gate (so a picked instance is forwarded to its holder like a
// named one), and says in the answer which instance it picked ("instance",
// with "picked": true).

// pickedFor are the routes that pick an instance when none is named, and
// the state they prefer.
var pickedFor = map[string]supervisor.State{
	"POST /internal/auto-login/start": supervisor.StateNeedsLogin,
	"POST /internal/session/export":   supervisor.StateReady,
	"GET /internal/models/raw":        supervisor.StateReady,
}

const pickedKey = "admin_picked"

// pickInstance names an instance for a bare request to a picking route:
// the first, in config order, in the route's preferred state, else the
// first of all. instanceParam returns it from then on, to the lease gate
// and the handler.
func (a *Admin) pickInstance() gin.HandlerFunc {
	return func(c *gin.Context) {
		prefer, ok := pickedFor[c.Request.Method+" "+c.FullPath()]
		if !ok || instanceParam(c) != "" {
			c.Next()
			return
		}
		name, found := pick(a.pool.Snapshot(), prefer)
		if !found {
			abortWith(c, http.StatusServiceUnavailable, CodeUnavailable, "no instance to pick: the pool is empty (name one with ?instance=NAME)")
			return
		}
		c.Set(pickedKey, name)
		// Also in the query, for the holder when the lease gate forwards
		// the request: it acts on this instance, not one of its own picking.
		q := c.Request.URL.Query()
		q.Set("instance", name)
		c.Request.URL.RawQuery = q.Encode()
		c.Next()
	}
}

// pickedInstance reports whether the request's instance was picked.
func pickedInstance(c *gin.Context) bool { return c.GetString(pickedKey) != "" }

func pick(snap route.Snapshot, prefer supervisor.State) (string, bool) {
	for _, in := range snap.Instances {
		if in.State == prefer {
			return in.Name, true
		}
	}
	if len(snap.Instances) == 0 {
		return "", false
	}
	return snap.Instances[0].Name, true
}
