package handlers

import (
	"context"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/telemetry"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
)

// Forwarded reports whether another replica forwarded r, as the edge
// verified its signed hop (it is never forwarded again: one hop at most).
func Forwarded(r *http.Request) bool { return access.From(r.Context()).Replica != "" }

// Router runs requests on the pool (*route.Router).
type Router interface {
	Open(ctx context.Context, c route.Call) (route.Opened, error)
}

// exchange is one API request's way to its answer, the relay.Pool its
// protocol is handed: the router, and, for a client's request on a
// clustered replica, the hop to the replica that holds its turn. It keeps
// what the router said about the request, for the request's record.
type exchange struct {
	router  Router
	api     string
	capture bool
	// hop carries the request to another replica; nil when it may not hop
	// (a single node, or a request another replica forwarded here).
	hop    *cluster.Proxy
	tracer telemetry.Tracer
	// w is the response, which names the instance that served it.
	w         servedWriter
	r         *http.Request
	body      []byte
	id, owner string // the request id and the caller's affinity owner

	// mu guards served: where the turn ran, as Open returned it, read by
	// the response writer, maybe from the keep-alive's goroutine.
	mu     sync.Mutex
	served route.Served
	answer route.Started
}

var _ relay.Pool = (*exchange)(nil)

// Open runs req on the router as this request.
func (x *exchange) Open(ctx context.Context, req *chat.Request, mayHop bool) (chat.Answer, string, error) {
	req.RequestID, req.Owner = x.id, x.owner
	o, err := x.router.Open(ctx, route.Call{API: x.api, Request: req, MayHop: mayHop && x.hop != nil, Capture: x.capture})
	x.mu.Lock()
	x.served = o.Served
	x.mu.Unlock()
	x.answer = o.Answer
	if o.Answer == nil {
		return nil, o.Holder, err
	}
	return o.Answer, "", nil
}

// Hop carries the request to the replica at holder, traced as the hop's
// span (which the holder's spans continue).
func (x *exchange) Hop(ctx context.Context, holder string) error {
	ctx, span := x.tracer.Start(ctx, telemetry.SpanForward)
	err := x.hop.Forward(ctx, &x.w, x.r, access.NewHopBody(x.body), holder)
	if span.IsRecording() {
		span.SetAttributes(attribute.String(telemetry.AttrTarget, holder))
		if err != nil {
			span.SetAttributes(attribute.String(telemetry.AttrOutcome, "unreachable"))
			span.SetStatus(codes.Error, "the replica could not be reached")
		} else {
			span.SetAttributes(attribute.String(telemetry.AttrOutcome, "forwarded"))
		}
		span.End()
	}
	return err
}

// Instance names the instance that took the turn, "" before one did.
func (x *exchange) Instance() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.served.Instance
}

// record is what the router said about the request, once it is over.
func (x *exchange) record() route.Served {
	if x.answer != nil {
		return x.answer.Served()
	}
	return x.served
}
