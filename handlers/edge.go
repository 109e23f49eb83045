package handlers

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/poolgate/poolgate/handlers/httpx"
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

// Opener runs requests on the pool (*route.Router).
type Opener interface {
	Open(ctx context.Context, c route.Call) (route.Opened, error)
}

// InstanceHeader names the instance that served a request.
const InstanceHeader = relay.InstanceHeader

// edge runs the answer APIs' turns, every one the same way (answer): the
// router, and the hop to another replica (nil on a single node).
type edge struct {
	router  Opener
	hop     *cluster.Proxy
	tracer  telemetry.Tracer
	capture bool
}

// answer runs one request of the protocol p, whose body was read once:
// decoded by p into its turn, opened through the router (or carried by the
// hop to the replica that holds the turn, while the response is
// untouched), encoded by p's encoder through p's relay. It returns how the
// request ended and what the router said of it, for the request's record.
// Every turn goes through here, and Router.Open is called nowhere else
// (edge.open, from stream or collect).
func (e *edge) answer(w http.ResponseWriter, r *http.Request, api string, p relay.Protocol, body []byte) (relay.Outcome, route.Served) {
	rl := p.Relay()
	t, err := p.Decode(r, body)
	if err != nil {
		return rl.Fail(r.Context(), w, err), route.Served{}
	}
	mayHop := e.hop != nil && !Forwarded(r)
	if !mayHop {
		body = nil // only a hop needs it again
	}
	// The router's goroutines select on this ctx; cancelling it on return
	// frees them even when we stop reading early (a failed client write).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	t.Request.RequestID, t.Request.Owner = httpx.RequestID(ctx), httpx.Owner(ctx).Affinity
	c := &call{w: w, r: r, api: api, body: body, mayHop: mayHop}
	var out relay.Outcome
	var o route.Opened
	if t.Stream != nil {
		out, o = e.stream(ctx, cancel, c, rl, t)
	} else {
		out, o = e.collect(ctx, c, rl, t)
	}
	if t.Over != nil {
		t.Over(ctx, out)
	}
	if o.Answer != nil {
		return out, o.Answer.Served()
	}
	return out, o.Served
}

// call is one request on its way through answer.
type call struct {
	w      http.ResponseWriter
	r      *http.Request
	api    string
	body   []byte // for the hop; nil when it may not hop
	mayHop bool
}

// forwardTo returns the hop of c to holder, for the relay to run.
func (e *edge) forwardTo(ctx context.Context, c *call, holder string) func() error {
	return func() error { return e.forward(ctx, c.w, c.r, c.body, holder) }
}

// stream runs a streamed turn. The keep-alives run from before the answer
// is opened: a wait in the queue is kept alive too.
func (e *edge) stream(ctx context.Context, cancel context.CancelFunc, c *call, rl *relay.Relay, t *relay.Decoded) (relay.Outcome, route.Opened) {
	sse := rl.NewStream(c.w, t.ContentType)
	st := rl.Start(ctx, cancel, sse, t.Stream(sse))
	o, err := e.open(ctx, c.api, t.Request, c.mayHop)
	if o.Holder != "" && st.Hop(o.Holder, e.forwardTo(ctx, c, o.Holder)) {
		st.Stop()
		return relay.Outcome{Forwarded: true}, o
	}
	if o.Holder != "" {
		o, err = e.open(ctx, c.api, t.Request, false)
	}
	st.Served(o.Served.Instance)
	return st.Relay(answerOf(o), err), o
}

// collect runs a turn answered with one body. Nothing is written before
// the whole answer: the hop can always be tried.
func (e *edge) collect(ctx context.Context, c *call, rl *relay.Relay, t *relay.Decoded) (relay.Outcome, route.Opened) {
	o, err := e.open(ctx, c.api, t.Request, c.mayHop)
	if o.Holder != "" && rl.Hop(ctx, o.Holder, e.forwardTo(ctx, c, o.Holder)) {
		return relay.Outcome{Forwarded: true}, o
	}
	if o.Holder != "" {
		o, err = e.open(ctx, c.api, t.Request, false)
	}
	served(c.w, o.Served.Instance)
	if s, ok := t.Body.(relay.ServedBy); ok {
		s.ServedBy(o.Served.Instance)
	}
	return rl.Collect(ctx, c.w, answerOf(o), err, t.Body), o
}

// open runs req on the router as this request; mayHop lets it name the
// replica that holds the turn instead (Opened.Holder).
func (e *edge) open(ctx context.Context, api string, req *chat.Request, mayHop bool) (route.Opened, error) {
	return e.router.Open(ctx, route.Call{API: api, Request: req, MayHop: mayHop, Capture: e.capture})
}

// answerOf is the started answer of o, nil when there is none.
func answerOf(o route.Opened) chat.Answer {
	if o.Answer == nil {
		return nil
	}
	return o.Answer
}

// served names the instance that took the turn on a response not yet
// written (one that failed before any worker took it goes without).
func served(w http.ResponseWriter, instance string) {
	if instance != "" && w.Header().Get(InstanceHeader) == "" {
		w.Header().Set(InstanceHeader, instance)
	}
}

// forward carries the request to the replica at holder, traced as the
// hop's span (which the holder's spans continue). An error means nothing
// was written.
func (e *edge) forward(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, holder string) error {
	ctx, span := e.tracer.Start(ctx, telemetry.SpanForward)
	err := e.hop.Forward(ctx, w, r, access.NewHopBody(body), holder)
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
