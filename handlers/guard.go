package handlers

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// browserGuard protects a listener that serves without credentials (no API
// keys, loopback only) from the web pages its operator's browser opens: with
// nothing to authenticate, any page could otherwise drive the API and the
// admin endpoints with simple cross-origin requests, and read them by DNS
// rebinding. A request must name a loopback host (unless anyHost, for an
// explicitly insecure public listener), carry no Origin but its own, and a
// body must be JSON, which no cross-origin page can send without a preflight
// this server never approves. Clients that aren't browsers send no Origin
// and pass.
//
// open says whether the guard applies now (no keys in force); nil means
// always.
func (t *table) browserGuard(anyHost bool, open func() bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		switch {
		case open != nil && !open():
			c.Next()
		case !anyHost && !LoopbackHost(r.Host):
			t.refuse(c, http.StatusForbidden, "host "+r.Host+" is not this gateway's: without API keys it answers only on a loopback address (set POOLGATE_API_KEYS to serve other names)")
		case !SameOrigin(r):
			t.refuse(c, http.StatusForbidden, "cross-origin requests are refused: without API keys this gateway must not be driven by a web page")
		case hasBody(r) && !jsonBody(r):
			t.refuse(c, http.StatusUnsupportedMediaType, "the body must be sent as application/json")
		default:
			c.Next()
		}
	}
}

func (t *table) refuse(c *gin.Context, status int, msg string) {
	t.writeError(c, status, msg)
	c.Abort()
}

// LoopbackHost reports whether a Host header names this machine by a
// loopback address or "localhost".
func LoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SameOrigin reports whether a request comes from no web page or from this
// server's own: its Origin, if any, is its own host, and a browser's
// Sec-Fetch-Site, if any, says the user typed it or this origin sent it
// (a browser sends no Origin with a simple GET, but always Sec-Fetch-Site).
func SameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "none", "same-origin":
	default:
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

func jsonBody(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}
