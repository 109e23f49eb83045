// Package telemetry is how poolgate's packages trace: each is handed a
// trace.TracerProvider (the daemon builds it from the OTEL_* environment
// with otelenv, which alone links the SDK) and makes a Tracer of it here. A
// Tracer made of nil or of a no-op provider is off: Start hands back the
// caller's context and a span that records nothing, so a package guards its
// attribute building with On and costs nothing while tracing is off. The span and attribute names poolgate
// emits are listed here, in one place.
package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span names.
const (
	SpanKeyLimits = "poolgate.key_limits" // admission under the caller's key's limits
	SpanAffinity  = "poolgate.affinity"   // the conversation's affinity lookup
	SpanAdmission = "poolgate.admission"  // the wait for a worker's slot (the queue)
	SpanAttempt   = "poolgate.attempt"    // one try of the turn on one worker
	SpanForward   = "poolgate.forward"    // the hop to the replica that holds the conversation
	SpanLogin     = "poolgate.login"      // one login of an account
)

// Attribute keys.
const (
	AttrRequestID  = "poolgate.request_id"
	AttrKey        = "poolgate.key" // the key's name, never the key
	AttrInstance   = "poolgate.instance"
	AttrAccount    = "poolgate.account"
	AttrModel      = "poolgate.model"
	AttrReused     = "poolgate.reused"
	AttrTTFTMS     = "poolgate.ttft_ms"
	AttrOutcome    = "poolgate.outcome"
	AttrAttempt    = "poolgate.attempt"
	AttrHit        = "poolgate.affinity.hit"
	AttrQueueMS    = "poolgate.queue_ms"
	AttrLimit      = "poolgate.limit"
	AttrTarget     = "poolgate.target"
	AttrForwarded  = "poolgate.forwarded_by"
	AttrLoginStage = "poolgate.login.result"
	// AttrConversation is the conversation's name (pool/route: a keyed
	// hash, never its text).
	AttrConversation = "poolgate.conversation"
)

// Tracer starts poolgate's spans, or nothing when tracing is off.
type Tracer struct {
	t  trace.Tracer
	on bool
}

// New returns the Tracer of scope (the package's import path) from tp; nil
// or a no-op provider gives a Tracer that is off.
func New(tp trace.TracerProvider, scope string) Tracer {
	if !Enabled(tp) {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(scope), on: true}
}

// Enabled reports whether tp records anything.
func Enabled(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, off := tp.(noop.TracerProvider)
	return !off
}

// On reports whether the Tracer records spans.
func (t Tracer) On() bool { return t.on }

// idle is the span of a Tracer that is off: it records nothing, and ending
// it ends nothing.
var idle = trace.SpanFromContext(context.Background())

// Start starts a span as a child of ctx's; off, it returns ctx unchanged.
func (t Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !t.on {
		return ctx, idle
	}
	return t.t.Start(ctx, name, opts...)
}

// TraceID returns the id of ctx's trace in hex, "" when ctx carries none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Propagator carries a trace across HTTP: W3C traceparent/tracestate and
// baggage, as a client sends them and as one replica hands a request to
// another.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// ChildrenOnly wraps tp so that its tracers start spans only inside a trace
// already under way: an instrumented client used both by requests and by
// background loops (a Redis client renewing leases every second) then adds
// its calls to the requests' traces without a trace of its own per tick.
func ChildrenOnly(tp trace.TracerProvider) trace.TracerProvider {
	if !Enabled(tp) {
		return noop.NewTracerProvider()
	}
	return childrenOnly{TracerProvider: tp}
}

type childrenOnly struct{ trace.TracerProvider }

func (p childrenOnly) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return childTracer{Tracer: p.TracerProvider.Tracer(name, opts...)}
}

type childTracer struct{ trace.Tracer }

func (t childTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, idle
	}
	return t.Tracer.Start(ctx, name, opts...)
}
