package handlers

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/gemini"
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
// admits the caller only if the route's entry in access.Routes does. A
// Gemini client's key (x-goog-api-key, ?key=) counts as its Authorization
// (gemini.TakeKey). A route the table does not list is refused: a new route is closed
// until it is given its callers. A request that matches no route passes on
// to the 404 or 405, which reveal nothing. Refusals come in the caller's
// protocol, or in the admin API's shape on the admin surface.
func Authorize(cr *access.Credentials, adminErr AdminErrorFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		path := c.FullPath()
		// A hop is checked against the query as it arrived: the replica
		// that signed it took the client's key out already.
		if gemini.IsRequest(c.Request) && c.Request.Header.Get(access.HopHeader) == "" {
			gemini.TakeKey(c.Request)
		}
		caller, v, ok := cr.Identify(c.Request)
		access.StripHop(c.Request)
		if presented(caller) {
			if !httpx.Trust(c.Request.Context(), connKey(caller)) {
				tooManyConns(c, adminErr)
				return
			}
		} else {
			// Nothing ties this connection to anyone: it serves one
			// request, and its count against max_unauthenticated_conns
			// ends with it.
			c.Header("Connection", "close")
		}
		if answer := caller.HopAnswer(); answer != "" {
			// The forwarding replica relays only an answer signed for its
			// hop; the body it sent may sit in a temporary file.
			c.Writer.Header().Set(access.AnswerHeader, answer)
			defer c.Request.Body.Close()
		}
		if ok && path != "" {
			need, known := access.NeedOf(c.Request.Method, path)
			if !known {
				need = 0 // Decide refuses it
			}
			v, ok = cr.Decide(need, caller)
		}
		if !ok {
			if access.IsAdminPath(c.Request.URL.Path) && adminErr != nil {
				adminErr(c.Writer, v.Status, v.Code, v.Message)
			} else {
				WriteError(c.Writer, c.Request, v.Status, v.Message)
			}
			c.Abort()
			return
		}
		c.Request = c.Request.WithContext(access.WithCaller(c.Request.Context(), caller))
		c.Next()
	}
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
// connections already, and closes its connection: the client has others.
func tooManyConns(c *gin.Context, adminErr AdminErrorFunc) {
	c.Header("Connection", "close")
	p := apierr.Classify(httpx.ErrTooManyConns)
	if access.IsAdminPath(c.Request.URL.Path) && adminErr != nil {
		c.Header("Retry-After", "1")
		adminErr(c.Writer, p.Status, p.Code, p.Message)
	} else {
		writeProblem(c.Writer, c.Request, &p)
	}
	c.Abort()
}

// presented reports whether the caller showed a credential in force (a key,
// a token, a replica's proof; on an open gateway anyone counts).
func presented(c access.Caller) bool {
	return c.Key != nil || c.Token != "" || c.Replica != ""
}
