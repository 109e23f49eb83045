package cluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/poolgate/poolgate/internal/access"
)

// Proxy carries a request to another replica: the one hop a request may
// make, for the API (a turn another replica holds) and the admin API (an
// action on an account another replica drives) alike. The hop names this
// replica and proves it with the cluster token (the headers the receiving
// edge checks and strips), and keeps the request id, so one id follows the
// request across replicas. It is safe for concurrent use.
type Proxy struct {
	// From names this replica; Token is the cluster token.
	From, Token string
	// Client sends the hops (nil: http.DefaultClient).
	Client *http.Client
}

// hopByHop headers describe one connection, not the request, so they are
// not carried over (nor is the length, which the body sets again).
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// requestIDHeader carries the request id across the hop.
const requestIDHeader = "X-Request-Id"

// Forward sends r, with body, to the replica at base and copies its answer
// to w as it comes, flushing each piece. It returns an error only when
// nothing was written to w (the replica could not be reached), so the
// caller may still answer the request itself. The request id is the one
// already set on w's headers.
func (p *Proxy) Forward(ctx context.Context, w http.ResponseWriter, r *http.Request, body io.Reader, base string) error {
	base = strings.TrimRight(base, "/")
	if r.ContentLength == 0 {
		// A request without a body goes on without one (not as an empty
		// chunked body, which a JSON-only guard would refuse).
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), body)
	if err != nil {
		return err
	}
	if req.ContentLength == 0 && body != nil && r.ContentLength > 0 {
		req.ContentLength = r.ContentLength // a streamed body of a declared length
	}
	for k, vs := range r.Header {
		if !hopByHop[k] {
			req.Header[k] = vs
		}
	}
	if id := w.Header().Get(requestIDHeader); id != "" {
		req.Header.Set(requestIDHeader, id)
	}
	req.Header.Set(access.HopHeader, p.From)
	req.Header.Set(access.TokenHeader, p.Token)
	client := p.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("hop to %s: %w", base, err)
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		// This replica's request id is set already: the same id.
		if !hopByHop[k] && k != requestIDHeader {
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
				return nil // the client went away; its context ends the rest
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			return nil
		}
	}
}
