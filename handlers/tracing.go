package handlers

import (
	"errors"
	"strconv"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/keylimits"
	"github.com/poolgate/poolgate/internal/telemetry"
)

const tracerScope = "github.com/poolgate/poolgate/handlers"

// trace starts the request's server span: a child of the caller's
// traceparent when it sends one (a client, or the replica that forwarded
// the request here), else a new trace. The span is named after the route,
// never the raw path, and carries the request id, the key's name (never the
// key) and the status. Only the public API (the table's endpoints) is
// traced: probes, scrapes and the dashboard's polling would each be a trace
// every few seconds. Install it only when tracing is on: New does.
func (t *table) trace(tp trace.TracerProvider) gin.HandlerFunc {
	tr := telemetry.New(tp, tracerScope)
	return func(c *gin.Context) {
		if !t.serves(c) {
			c.Next()
			return
		}
		route := c.FullPath()
		r := c.Request
		ctx := telemetry.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		name := r.Method + " " + route
		attrs := []attribute.KeyValue{attribute.String("http.request.method", r.Method), attribute.String("http.route", route)}
		ctx, span := tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		c.Request = r.WithContext(ctx)
		c.Next()
		status := c.Writer.Status()
		span.SetAttributes(attribute.Int("http.response.status_code", status),
			attribute.String(telemetry.AttrRequestID, httpx.RequestID(c.Request.Context())))
		caller := access.From(c.Request.Context())
		if name := caller.KeyName(); name != "" {
			span.SetAttributes(attribute.String(telemetry.AttrKey, name))
		}
		if caller.Replica != "" { // as its signed hop proved it
			span.SetAttributes(attribute.String(telemetry.AttrForwarded, caller.Replica))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
		span.End()
	}
}

// endLimitSpan ends the key-limits span: the key's name, and the limit that
// refused the request, if one did.
func endLimitSpan(span trace.Span, key string, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(telemetry.AttrKey, key))
	var denied *keylimits.Denied
	switch {
	case errors.As(err, &denied):
		span.SetAttributes(attribute.String(telemetry.AttrLimit, denied.Limit), attribute.String(telemetry.AttrOutcome, "denied"))
	case err != nil:
		span.SetAttributes(attribute.String(telemetry.AttrOutcome, "unavailable"))
		span.SetStatus(codes.Error, "key limits unavailable")
	default:
		span.SetAttributes(attribute.String(telemetry.AttrOutcome, "admitted"))
	}
	span.End()
}
