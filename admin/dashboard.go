package admin

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the dashboard page
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// dashboardHTML is the operator page: one self-contained document (inline
// CSS and JS, nothing fetched from elsewhere) that holds no data. Everything
// it shows comes from the /internal API with the token the operator types.
//
//go:embed dashboard.html
var dashboardHTML []byte

// RegisterDashboard adds GET /admin, the operator page, to r. The page itself
// needs no credentials; every call it makes carries the admin token as a
// Bearer header, so r must be the router that also serves /internal.
func (a *Admin) RegisterDashboard(r gin.IRouter) {
	csp := dashboardCSP(dashboardHTML)
	serve := func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
		h.Set("Cache-Control", "no-store")
		c.Data(http.StatusOK, "text/html; charset=utf-8", dashboardHTML)
	}
	r.GET("/admin", serve)
	r.HEAD("/admin", serve)
}

// dashboardCSP allows the page's own inline <script> and <style> by hash
// (not 'unsafe-inline', so an injected script could not run), fetches to
// this origin only, and no framing, forms, plugins or base rewriting.
func dashboardCSP(page []byte) string {
	hashes := func(tag string) string {
		var out []string
		for _, body := range inlineBodies(page, tag) {
			sum := sha256.Sum256(body)
			out = append(out, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		}
		return strings.Join(out, " ")
	}
	return strings.Join([]string{
		"default-src 'none'",
		"script-src " + hashes("script"),
		"style-src " + hashes("style"),
		"connect-src 'self'",
		"img-src 'self' data: blob:",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
}

// inlineBodies returns the text of every <tag>...</tag> in page, exactly as
// the browser hashes it.
func inlineBodies(page []byte, tag string) [][]byte {
	open, closing := []byte("<"+tag+">"), []byte("</"+tag+">")
	var out [][]byte
	for {
		i := bytes.Index(page, open)
		if i < 0 {
			return out
		}
		page = page[i+len(open):]
		j := bytes.Index(page, closing)
		if j < 0 {
			return out
		}
		out = append(out, page[:j])
		page = page[j+len(closing):]
	}
}
