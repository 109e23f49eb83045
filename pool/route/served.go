package route

import (
	"context"
	"log/slog"
	"time"
)

// logTurn writes the one line per turn that says who served it: the
// instance, its account and kind, the model (and the name asked for, when
// an alias or the default model stood in for it), the conversation's name,
// whether the upstream session was continued (and, for a follow-up that
// found its entry but could not, why not), the latency and how the turn
// ended.
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
	var buf [16]slog.Attr
	attrs := append(buf[:0], slog.String("instance", slot.Instance()), slog.String("account", slot.m.account),
		slog.String("driver", slot.m.kind), slog.String("model", rq.model), slog.String("conversation", rq.conv),
		slog.Bool("reused", rq.reused), slog.Int64("latency_ms", time.Since(rq.start).Milliseconds()),
		slog.String("outcome", outcome), slog.String("request_id", rq.RequestID))
	if rq.Model != rq.model {
		// An alias, or the default model, stood in for the name, which is
		// the caller's and of any length.
		attrs = append(attrs, slog.String("requested", rq.Model[:min(len(rq.Model), 200)]))
	}
	if rq.fresh != "" {
		attrs = append(attrs, slog.String("new_session", rq.fresh))
	}
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
