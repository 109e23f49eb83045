package telemetry

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

// A Tracer of nil or of a no-op provider is off: the context comes back as
// it was, the span records nothing, and it costs no allocation.
func TestOffCostsNothing(t *testing.T) {
	for name, tr := range map[string]Tracer{"nil": New(nil, "x"), "noop": New(noop.NewTracerProvider(), "x")} {
		ctx := context.Background()
		got, span := tr.Start(ctx, SpanAttempt)
		if tr.On() || got != ctx || span.IsRecording() || span.SpanContext().IsValid() {
			t.Errorf("%s: on=%v, context changed %v, span recording %v", name, tr.On(), got != ctx, span.IsRecording())
		}
		if n := testing.AllocsPerRun(100, func() {
			_, s := tr.Start(ctx, SpanAttempt)
			s.End()
		}); n != 0 {
			t.Errorf("%s: %v allocations per span, want none", name, n)
		}
	}
}

// ChildrenOnly starts a span only inside a trace under way.
func TestChildrenOnly(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	child := ChildrenOnly(tp).Tracer("redis")
	_, lone := child.Start(context.Background(), "get")
	lone.End()
	ctx, parent := New(tp, "x").Start(context.Background(), "request")
	_, inner := child.Start(ctx, "get")
	inner.End()
	parent.End()
	ended := rec.Ended()
	if len(ended) != 2 || ended[0].Name() != "get" || ended[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("ended spans %v, want the request and its get only", ended)
	}
	if TraceID(ctx) != parent.SpanContext().TraceID().String() || TraceID(context.Background()) != "" {
		t.Errorf("TraceID = %q", TraceID(ctx))
	}
	if Enabled(ChildrenOnly(nil)) {
		t.Errorf("ChildrenOnly(nil) is on")
	}
}
