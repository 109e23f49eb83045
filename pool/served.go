package pool

import (
	"context"
	"log/slog"
	"time"
)

// logTurn writes the one line per turn that says who served it: the
// instance, its account, the model, whether the upstream session was
// continued, the latency and how the turn ended.
func (r *Router) logTurn(rq *request, slot *Slot, outcome string, err error) {
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelWarn
	}
	if !r.log.Enabled(context.Background(), level) {
		return // spare the attributes' allocations
	}
	attrs := []any{"instance", slot.Instance(), "account", slot.m.account, "model", rq.model,
		"reused", rq.reused, "latency_ms", time.Since(rq.start).Milliseconds(), "outcome", outcome,
		"request_id", rq.RequestID}
	if rq.api != "" {
		attrs = append(attrs, "api", rq.api)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	r.log.Log(context.Background(), level, "turn", attrs...)
}
