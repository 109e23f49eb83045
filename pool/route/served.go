package route

import (
	"context"
	"log/slog"
	"time"
)

// logTurn writes the one line per turn that says who served it: the
// instance, its account, the model, the conversation's name, whether the
// upstream session was continued, the latency and how the turn ended.
func (r *Router) logTurn(rq *request, slot *turnSlot, outcome string, err error) {
	defer r.endAttempt(rq, outcome, err)
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(context.Background(), level) {
		return // spare the attributes' allocations
	}
	// Typed attributes in a fixed array: no value is boxed into an
	// interface, and the slice stays on the stack.
	var buf [12]slog.Attr
	attrs := append(buf[:0], slog.String("instance", slot.Instance()), slog.String("account", slot.m.account),
		slog.String("model", rq.model), slog.String("conversation", rq.conv), slog.Bool("reused", rq.reused),
		slog.Int64("latency_ms", time.Since(rq.start).Milliseconds()), slog.String("outcome", outcome),
		slog.String("request_id", rq.RequestID))
	if rq.api != "" {
		attrs = append(attrs, slog.String("api", rq.api))
	}
	if err != nil {
		attrs = append(attrs, slog.Any("err", err))
	}
	if rq.span != nil {
		attrs = append(attrs, slog.String("trace_id", rq.span.SpanContext().TraceID().String()))
	}
	r.log.LogAttrs(context.Background(), level, "turn", attrs...)
}
