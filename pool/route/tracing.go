package route

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/telemetry"
)

// The router's spans. Each helper does nothing while tracing is off, so
// the request path pays for no attribute it would not record. No
// attribute carries a message's text or an error's message (an upstream's
// error may quote the prompt): outcomes are named by kind.

// acquire waits for a slot for rq's turn; traced, the wait is the
// admission span, with the time spent in the queue.
func (r *Router) acquire(ctx context.Context, rq *request) (*turnSlot, error) {
	want := preference{Prefer: rq.hit.Instance, Hint: rq.hint, Exclude: rq.excluded, Target: &rq.target}
	if !r.tracer.On() {
		return r.pool.acquire(ctx, want)
	}
	begin := time.Now()
	actx, span := r.tracer.Start(ctx, telemetry.SpanAdmission)
	slot, err := r.pool.acquire(actx, want)
	span.SetAttributes(attribute.Int64(telemetry.AttrQueueMS, time.Since(begin).Milliseconds()))
	if err != nil {
		span.SetAttributes(attribute.String(telemetry.AttrOutcome, failureOutcome(err)))
		span.SetStatus(codes.Error, failureOutcome(err))
	} else {
		span.SetAttributes(attribute.String(telemetry.AttrInstance, slot.Instance()),
			attribute.String(telemetry.AttrOutcome, "admitted"))
	}
	span.End()
	return slot, err
}

// endAffinitySpan ends the affinity lookup's span: the conversation's
// name, whether it had an entry, and the instance it names.
func endAffinitySpan(span trace.Span, conv string, a Affinity, err error) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String(telemetry.AttrConversation, conv), attribute.Bool(telemetry.AttrHit, err == nil))
	if err == nil {
		span.SetAttributes(attribute.String(telemetry.AttrInstance, a.Instance))
	}
	span.End()
}

// startAttempt opens the span of one try of rq's turn on slot's worker.
func (r *Router) startAttempt(ctx context.Context, rq *request, slot *turnSlot) {
	rq.tries++
	if !r.tracer.On() {
		return
	}
	_, rq.span = r.tracer.Start(ctx, telemetry.SpanAttempt, trace.WithAttributes(
		attribute.Int(telemetry.AttrAttempt, rq.tries),
		attribute.String(telemetry.AttrInstance, slot.Instance()),
		attribute.String(telemetry.AttrAccount, slot.m.account),
		attribute.String(telemetry.AttrModel, rq.model),
		attribute.String(telemetry.AttrConversation, rq.conv),
		attribute.Bool(telemetry.AttrReused, rq.reused)))
	rq.began = time.Now()
}

// firstEvent notes the attempt's time to its first event.
func firstEvent(rq *request) {
	if rq.span != nil {
		rq.span.SetAttributes(attribute.Int64(telemetry.AttrTTFTMS, time.Since(rq.began).Milliseconds()))
	}
}

// endAttempt ends the attempt in progress with its outcome: the finish
// reason of a turn that ended, else the kind of its failure.
func (r *Router) endAttempt(rq *request, outcome string, err error) {
	span := rq.span
	if span == nil {
		return
	}
	rq.span = nil
	span.SetAttributes(attribute.String(telemetry.AttrOutcome, outcome))
	if err != nil {
		span.SetStatus(codes.Error, failureOutcome(err))
	}
	span.End()
}

// failureOutcome names the kind of a turn's failure.
func failureOutcome(err error) string {
	var rl *chat.RateLimitedError
	var ov *chat.OverloadedError
	var up *chat.UpstreamError
	switch {
	case errors.Is(err, chat.ErrWorkerGone):
		return "worker_gone"
	case errors.Is(err, chat.ErrNotLoggedIn):
		return "not_logged_in"
	case errors.Is(err, chat.ErrNoInstance):
		return "no_instance"
	case errors.As(err, &rl):
		return "rate_limited"
	case errors.As(err, &ov):
		return "overloaded"
	case errors.As(err, &up):
		return "upstream_error"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "error"
}
