package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/access"
)

// AdminErrorFunc writes a refusal in the admin API's error shape.
type AdminErrorFunc func(w http.ResponseWriter, status int, code, message string)

// Authorize is the one place that decides who may call a route, on every
// listener: it names the caller from the credentials the request presents,
// or from the signed hop of the replica that forwarded it, whose body it
// checks against the signature (internal/access); removes the replica
// headers so nothing behind it sees them; signs the answer to a hop; and
// admits the caller only if the route's rule does. The rules are
// access.Routes, the operator surface's table, and, for the endpoints of
// the protocols table, access.APIUser (Routes): an answer API is for API
// users by construction. A route no rule names is refused: a new route is
// closed until it is given its callers. A request that matches no route
// passes on to the 404 or 405, which reveal nothing. Refusals come in the
// caller's protocol, or in the admin API's shape on the admin surface.
// This Authorize serves a listener without protocols (the admin
// listener's): its refusals outside the admin API are in OpenAI's shape.
func Authorize(cr *access.Credentials, adminErr AdminErrorFunc) gin.HandlerFunc {
	return (&gate{t: newTable(nil), cr: cr, adminErr: adminErr}).authorize
}

// gate decides who may call a route, for a listener serving the protocols
// of t.
type gate struct {
	t        *table
	cr       *access.Credentials
	adminErr AdminErrorFunc
}

// authorize admits a request to a route that is not an endpoint of the
// table by its rule in access.Routes. An endpoint's request is admitted by
// its handler (server.endpoint), after its protocol's one look at it,
// which may find its key where only that protocol's clients send it. A
// request to no route is looked at by the protocol that claims it.
func (g *gate) authorize(c *gin.Context) {
	if g.t.serves(c) {
		c.Next()
		return
	}
	path := c.FullPath()
	if p := g.t.claimed(c.Request); p != nil && path == "" {
		p.Accept(c.Request)
	}
	need, known := access.NeedOf(c.Request.Method, path)
	if !known {
		need = 0 // Decide refuses it
	}
	hop, ok := g.admit(c, need, path != "")
	if !ok {
		c.Abort()
		return
	}
	if hop {
		defer c.Request.Body.Close()
	}
	c.Next()
}

// admit names the caller of c's request and decides whether need admits
// it to its route (routed: the request matched one), answering a refusal
// in the shape of the request's protocol (or the admin API's, on its
// paths). hop says the caller is
// a replica's hop, whose body the caller must close once the request is
// over: the forwarding replica relays only an answer signed for its hop,
// and the body it sent may sit in a temporary file.
func (g *gate) admit(c *gin.Context, need access.Need, routed bool) (hop, ok bool) {
	caller, v, ok := g.cr.Identify(c.Request)
	access.StripHop(c.Request)
	if presented(caller) {
		if !httpx.Trust(c.Request.Context(), connKey(caller)) {
			g.tooManyConns(c)
			return false, false
		}
	} else {
		// Nothing ties this connection to anyone: it serves one
		// request, and its count against max_unauthenticated_conns
		// ends with it.
		c.Header("Connection", "close")
	}
	if answer := caller.HopAnswer(); answer != "" {
		c.Writer.Header().Set(access.AnswerHeader, answer)
		hop = true
	}
	if ok && routed {
		v, ok = g.cr.Decide(need, caller)
	}
	if !ok {
		if access.IsAdminPath(c.Request.URL.Path) && g.adminErr != nil {
			g.adminErr(c.Writer, v.Status, v.Code, v.Message)
		} else {
			g.t.writeError(c, v.Status, v.Message)
		}
		if hop {
			_ = c.Request.Body.Close()
		}
		return false, false
	}
	c.Request = c.Request.WithContext(access.WithCaller(c.Request.Context(), caller))
	return hop, true
}

// connKey names the API key whose connections the caller's counts
// against: a client's key, not a token's, a replica's or an open gateway's
// (httpx.Conns).
func connKey(c access.Caller) string {
	if c.Key == nil || c.Open || c.Replica != "" {
		return ""
	}
	return c.Key.Name
}

// tooManyConns refuses a request whose key holds max_conns_per_key
// connections already, in the shape of the request's protocol (or the
// admin API's, on its paths), and closes its connection: the client has
// others.
func (g *gate) tooManyConns(c *gin.Context) {
	c.Header("Connection", "close")
	p := apierr.Classify(httpx.ErrTooManyConns)
	if access.IsAdminPath(c.Request.URL.Path) && g.adminErr != nil {
		c.Header("Retry-After", "1")
		g.adminErr(c.Writer, p.Status, p.Code, p.Message)
	} else {
		g.t.writeProblem(c.Writer, c.Request, &p)
	}
}

// presented reports whether the caller showed a credential in force (a key,
// a token, a replica's proof; on an open gateway anyone counts).
func presented(c access.Caller) bool {
	return c.Key != nil || c.Token != "" || c.Replica != ""
}
