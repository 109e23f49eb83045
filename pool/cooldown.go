package pool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Cooldowns are what a rate limit does to an instance: out of rotation until
// the upstream's retry-after (or an exponential guess) has passed and a
// health check passed. The operator can end one early, or probe the account
// now with a real turn.

// ErrBusy: the instance has no free slot for a probe, or isn't running.
var ErrBusy = errors.New("instance busy")

// ClearCooldown puts the named instance back in rotation now (and starts its
// cooldown backoff over). It reports whether there was a cooldown.
func (p *Pool) ClearCooldown(name string) (bool, error) {
	w, ok := p.byName[name]
	if !ok {
		return false, ErrUnknownInstance
	}
	p.mu.Lock()
	had := !w.coolUntil.IsZero()
	w.coolUntil, w.coolCount = time.Time{}, 0
	p.mu.Unlock()
	if had {
		w.log.Info("cooldown cleared by the operator")
		p.broadcast()
	}
	return had, nil
}

// ProbeResult is the outcome of one probe turn.
type ProbeResult struct {
	Instance string `json:"instance"`
	// OK: the account answered a turn; any cooldown was cleared.
	OK        bool  `json:"ok"`
	LatencyMS int64 `json:"latency_ms"`
	// Error is why the probe failed ("" when OK).
	Error string `json:"error,omitempty"`
	// CooldownUntil is the instance's cooldown after the probe, if any.
	CooldownUntil *time.Time `json:"cooldown_until,omitempty"`
}

// probePrompt is the probe's whole question: short to send and to answer.
const probePrompt = "Reply with the single word OK."

// Probe sends one short turn to the named instance, cooling down or not, and
// acts on the answer: an answer ends the cooldown, a rate limit sets it from
// the upstream's retry-after, a lost login or worker is checked. It returns
// ErrBusy when the instance is not running or has no free slot.
func (p *Pool) Probe(ctx context.Context, name string) (ProbeResult, error) {
	w, ok := p.byName[name]
	if !ok {
		return ProbeResult{}, ErrUnknownInstance
	}
	slot, err := p.probeSlot(w)
	if err != nil {
		return ProbeResult{}, err
	}
	defer slot.Release()
	res := ProbeResult{Instance: name}
	start := time.Now()
	err = probeTurn(ctx, slot, w.probeModel())
	res.LatencyMS = time.Since(start).Milliseconds()
	var rl *chat.RateLimitedError
	switch {
	case err == nil:
		res.OK = true
		if had, _ := p.ClearCooldown(name); had {
			w.log.Info("probe answered: cooldown cleared")
		}
	case errors.As(err, &rl):
		d := w.cooldown(rl.RetryAfter)
		if p.metrics != nil {
			p.metrics.Cooldowns.Inc()
		}
		w.log.Warn("probe rate limited, cooling instance down", "for", d)
	case errors.Is(err, chat.ErrNotLoggedIn), errors.Is(err, chat.ErrWorkerGone):
		w.send(cmdCheck)
	}
	if err != nil {
		res.Error = err.Error()
	}
	if left, cooling := w.cooldownLeft(); cooling {
		t := time.Now().Add(left)
		res.CooldownUntil = &t
	}
	return res, nil
}

// probeSlot takes a slot on w whether or not it is cooling down.
func (p *Pool) probeSlot(w *Worker) (*Slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closing || w.state != StateReady || w.backend == nil:
		return nil, fmt.Errorf("%w: instance %s is %s", ErrBusy, w.cfg.Name, w.state)
	case w.inFlight >= w.cfg.MaxInFlight:
		return nil, fmt.Errorf("%w: instance %s has %d turns in flight", ErrBusy, w.cfg.Name, w.inFlight)
	}
	w.inFlight++
	p.inFlight++
	if p.metrics != nil {
		p.metrics.InFlight.Inc()
	}
	return &Slot{Worker: w, Backend: w.backend, pool: p, start: time.Now()}, nil
}

// probeModel is the first model the worker listed ("" lets it choose).
func (w *Worker) probeModel() string {
	w.pool.mu.Lock()
	defer w.pool.mu.Unlock()
	if len(w.models) > 0 {
		return w.models[0].ID
	}
	return ""
}

// probeTurn runs the probe turn to its end and frees its upstream session.
func probeTurn(ctx context.Context, slot *Slot, model string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t := &chat.Turn{RequestID: "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36), Model: model, MaxTokens: 16,
		Messages: []chat.Message{{Role: chat.RoleUser, Content: probePrompt}}}
	events, err := slot.Backend.Chat(ctx, t)
	if err != nil {
		return err
	}
	for ev := range events {
		switch ev.Type {
		case chat.EventError:
			cancel()
			for range events { // the stream ends once the turn has stopped
			}
			return ev.Err
		case chat.EventDone:
			if del, ok := slot.Backend.(SessionDeleter); ok && ev.SessionID != "" {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
				_ = del.DeleteSession(dctx, ev.SessionID) // best effort
				dcancel()
			}
			for range events {
			}
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return chat.ErrWorkerGone
}
