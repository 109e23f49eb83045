package pool

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Served records which instance a request's turn ran on, for the response
// header that tells a caller which account answered. The router fills it
// when a worker takes the turn (again on each retry); the handler reads it
// when it writes the response headers.
type Served struct {
	mu       sync.Mutex
	instance string
}

type servedKey struct{}

// WithServed returns ctx carrying a fresh Served.
func WithServed(ctx context.Context) (context.Context, *Served) {
	s := &Served{}
	return context.WithValue(ctx, servedKey{}, s), s
}

// Instance is the instance the turn runs on, "" before a worker took it.
func (s *Served) Instance() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.instance
}

func (s *Served) set(instance string) {
	s.mu.Lock()
	s.instance = instance
	s.mu.Unlock()
}

func markServed(ctx context.Context, instance string) {
	if s, ok := ctx.Value(servedKey{}).(*Served); ok {
		s.set(instance)
	}
}

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
