package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/pool"
)

// Forwarded reports whether another replica forwarded r, as the edge
// proved it with the cluster token (it is never forwarded again: one hop at
// most).
func Forwarded(r *http.Request) bool { return access.From(r.Context()).Replica != "" }

// hopByHop headers describe one connection, not the request, so they are
// not forwarded (nor is the length, which the proxied body sets again).
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// ClusterHop lets the router forward a client's request to the replica that
// holds its conversation: it keeps the body for a second send and installs
// the forwarder. A request that is itself forwarded (the edge checked its
// cluster token) is never forwarded again: one hop at most.
func ClusterHop(replicaID, token string, client *http.Client) gin.HandlerFunc {
	return func(c *gin.Context) {
		if Forwarded(c.Request) {
			c.Next()
			return
		}
		body, err := io.ReadAll(c.Request.Body)
		if err != nil {
			// Over the cap: let the protocol answer 413 in its shape.
			c.Request.Body = io.NopCloser(errReader{err})
			c.Next()
			return
		}
		c.Request.Body = io.NopCloser(bytes.NewReader(body))
		r, w := c.Request, c.Writer
		fw := func(ctx context.Context, url string) error {
			if !httpx.Claim(ctx, httpx.Forward) {
				return errAnsweringHere
			}
			return Proxy(ctx, client, w, r, strings.TrimRight(url, "/"), body, replicaID, token)
		}
		c.Request = r.WithContext(pool.WithForwarder(httpx.WithClaim(r.Context()), fw))
		c.Next()
	}
}

// errAnsweringHere refuses a forward once this replica's stream has started
// (a keep-alive went out while the request waited here).
var errAnsweringHere = errors.New("the answer already started on this replica")

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// Proxy sends the request (with body) to the replica at base, marked as
// forwarded by replicaID with the cluster token, and streams the answer back
// unbuffered. It returns an error only if nothing was written.
func Proxy(ctx context.Context, client *http.Client, w http.ResponseWriter, r *http.Request, base string, body []byte, replicaID, token string) error {
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range r.Header {
		if !hopByHop[k] {
			req.Header[k] = vs
		}
	}
	req.Header.Set("X-Request-Id", httpx.RequestID(ctx)) // one id across the hop
	req.Header.Set(access.HopHeader, replicaID)
	req.Header.Set(access.TokenHeader, token)
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("forward to %s: %w", base, err)
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if !hopByHop[k] && k != "X-Request-Id" { // keep this replica's (the same id, set by the middleware)
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client went away; the context ends the rest
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			return nil
		}
	}
}
