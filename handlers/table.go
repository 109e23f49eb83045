package handlers

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/tokens"
)

// table is the protocols table as the edge serves it: the protocols in the
// table's order, and the ones that declare each endpoint. Everything the
// edge knows of a protocol it learns here, from the protocol itself.
type table struct {
	apis   []relay.Protocol
	owners map[routeKey][]owner
	order  []routeKey // the routes, in the order the table declares them
}

// routeKey is a route as gin matched it.
type routeKey struct{ method, path string }

// owner is a protocol that declares an endpoint.
type owner struct {
	p  relay.Protocol
	ep relay.Endpoint
}

// newTable indexes apis' endpoints. An endpoint that serves what its
// protocol cannot (a count without a Counter, a listing without a Lister,
// a plain route without Serve) is a mistake of the protocol's, found here
// at start.
func newTable(apis []relay.Protocol) *table {
	t := &table{apis: apis, owners: map[routeKey][]owner{}}
	for _, p := range apis {
		for _, ep := range p.Endpoints() {
			_, counts := p.(relay.Counter)
			_, lists := p.(relay.Lister)
			if ep.Serves == relay.ServeCount && !counts || ep.Serves == relay.ServeModels && !lists ||
				ep.Serves == relay.ServePlain && ep.Serve == nil || ep.Serves == relay.AsEndpoint {
				panic(fmt.Sprintf("handlers: protocol %s: endpoint %s %s serves what the protocol cannot", p.Relay().Name(), ep.Method, ep.Path))
			}
			k := routeKey{ep.Method, ep.Path}
			if _, ok := t.owners[k]; !ok {
				t.order = append(t.order, k)
			}
			t.owners[k] = append(t.owners[k], owner{p, ep})
		}
	}
	return t
}

// Routes are the rules of the answer APIs' routes, generated from the
// protocols table: each endpoint of each protocol admits any API user
// (access.APIUser). With access.Routes, the operator surface's table, they
// are every route poolgate serves.
func Routes(apis []relay.Protocol) []access.Rule {
	t := newTable(apis)
	rules := make([]access.Rule, 0, len(t.order))
	for _, k := range t.order {
		rules = append(rules, access.Rule{Method: k.method, Path: k.path, Need: access.APIUser})
	}
	return rules
}

// serves reports whether c's route is an endpoint of the table.
func (t *table) serves(c *gin.Context) bool {
	_, ok := t.owners[routeKey{c.Request.Method, c.FullPath()}]
	return ok
}

// pick is the index of the owner that serves r: the first that claims
// it, else the first (an endpoint one protocol alone declares is always
// its, whatever claims the request).
func pick(os []owner, r *http.Request) int {
	if len(os) > 1 {
		for i, o := range os {
			if o.p.Claims(r) {
				return i
			}
		}
	}
	return 0
}

// claimed is the protocol r speaks, whose shape answers what the edge
// answers itself: the first in the table that claims it; nil when none
// does.
func (t *table) claimed(r *http.Request) relay.Protocol {
	for _, p := range t.apis {
		if p.Claims(r) {
			return p
		}
	}
	return nil
}

// writeProblem writes p in the shape of r's protocol; OpenAI's, which is
// every other client's default, when no protocol claims r.
func (t *table) writeProblem(w http.ResponseWriter, r *http.Request, p *apierr.Problem) {
	if proto := t.claimed(r); proto != nil {
		proto.Relay().WriteProblem(w, p)
		return
	}
	openaierr.Write(w, p)
}

// writeError writes an error the HTTP layer answers by status (a refused
// key, an unknown route, a body over its cap, a panic) in the request's
// protocol shape, named as apierr names the status's class.
func (t *table) writeError(c *gin.Context, status int, message string) {
	p := apierr.ForStatus(status, message)
	t.writeProblem(c.Writer, c.Request, &p)
}

func (t *table) notFound(c *gin.Context) {
	t.writeError(c, http.StatusNotFound, "unknown route "+c.Request.Method+" "+c.Request.URL.Path)
}

func (t *table) notAllowed(c *gin.Context) {
	t.writeError(c, http.StatusMethodNotAllowed, "method "+c.Request.Method+" not allowed on "+c.Request.URL.Path)
}

// server serves the table's endpoints.
type server struct {
	t       *table
	gate    *gate
	edge    *edge
	m       *metrics.Metrics
	acct    *Accounting
	log     *slog.Logger
	models  ModelLister
	maxBody int64
	budget  *httpx.Budget
	counts  *httpx.Slots
}

// endpoint serves a route the protocols in os declare: the one that serves
// the request takes its one look at it (Accept), then the request is
// authorized, its body capped, and it is served as its protocol says: a
// turn by the edge under the caller's key (observe), a token count under
// the key's limits (limited), the model listing, or as the protocol
// serves it. The route's parameters are the request's path values.
func (s *server) endpoint(os []owner) gin.HandlerFunc {
	type served struct{ turn, count gin.HandlerFunc }
	by := make([]served, len(os))
	for i, o := range os {
		p := o.p
		by[i].turn = s.observe(p)
		if c, ok := p.(relay.Counter); ok {
			by[i].count = s.limited(func(w http.ResponseWriter, r *http.Request) {
				body, err := httpx.ReadBody(r)
				if err != nil {
					p.Relay().Fail(r.Context(), w, err)
					return
				}
				relay.Count(w, r, p, c, body, s.counts, tokens.Count)
			})
		}
	}
	return func(c *gin.Context) {
		i := pick(os, c.Request)
		o := os[i]
		serving := o.p.Accept(c.Request)
		if serving == relay.AsEndpoint {
			serving = o.ep.Serves
		}
		hop, ok := s.gate.admit(c, access.APIUser, true)
		if !ok {
			return
		}
		if hop {
			defer c.Request.Body.Close()
		}
		key, held, b, ok := s.bodyCap(c)
		if !ok {
			return
		}
		if held > 0 {
			defer s.budget.Put(key, held)
		}
		if b != nil {
			defer func() { s.budget.Put(key, b.Taken) }()
		}
		for _, pv := range c.Params {
			c.Request.SetPathValue(pv.Key, pv.Value)
		}
		switch serving {
		case relay.ServeTurn:
			by[i].turn(c)
		case relay.ServeCount:
			by[i].count(c)
		case relay.ServeModels:
			o.p.(relay.Lister).WriteModels(c.Writer, c.Request, s.models.Models())
		case relay.ServePlain:
			o.ep.Serve(c.Writer, c.Request)
		default:
			s.t.notFound(c)
		}
	}
}
