package route

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Probes: the operator asks for one short turn on an instance, cooling
// down or not, to learn whether its account answers again; the probe acts
// on what the turn says (the cooldown itself: cooldown.go).

// ErrBusy: the instance has no free slot for a probe, or isn't running.
var ErrBusy = errors.New("instance busy")

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
	p.mu.Lock()
	m, ok := p.byName[name]
	p.mu.Unlock()
	if !ok {
		return ProbeResult{}, supervisor.ErrUnknownInstance
	}
	slot, model, err := p.probeSlot(m)
	if err != nil {
		return ProbeResult{}, err
	}
	defer slot.release()
	res := ProbeResult{Instance: name}
	start := time.Now()
	err = probeTurn(ctx, slot, model)
	res.LatencyMS = time.Since(start).Milliseconds()
	var rl *chat.RateLimitedError
	switch {
	case err == nil:
		res.OK = true
		p.mu.Lock()
		had := m.clearCooldownLocked()
		p.mu.Unlock()
		if had {
			p.log.Info("probe answered: cooldown cleared", "instance", name)
			p.broadcast()
		}
	case errors.As(err, &rl):
		d := p.coolDown(m, rl.RetryAfter)
		p.log.Warn("probe rate limited, cooling instance down", "instance", name, "for", d)
	case errors.Is(err, chat.ErrNotLoggedIn), errors.Is(err, chat.ErrWorkerGone):
		m.w.Check()
	}
	if err != nil {
		res.Error = err.Error()
	}
	p.mu.Lock()
	res.CooldownUntil = m.cooldownUntil()
	p.mu.Unlock()
	return res, nil
}

// probeSlot takes a slot on m whether or not it is cooling down, and names
// the model to ask (the first the worker listed; "" lets it choose).
func (p *Pool) probeSlot(m *member) (*turnSlot, string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closing || m.st.State != supervisor.StateReady || m.st.Backend == nil:
		return nil, "", fmt.Errorf("%w: instance %s is %s", ErrBusy, m.name, m.st.State)
	case !m.leased(time.Now()):
		return nil, "", fmt.Errorf("%w: instance %s is fenced: this replica does not hold its account's lease", ErrBusy, m.name)
	case m.inFlight >= m.max:
		return nil, "", fmt.Errorf("%w: instance %s has %d turns in flight", ErrBusy, m.name, m.inFlight)
	}
	m.inFlight++
	p.inFlight++
	if p.metrics != nil {
		p.metrics.InFlight.Inc()
	}
	model := ""
	if len(m.st.Models) > 0 {
		model = m.st.Models[0].ID
	}
	return &turnSlot{Backend: m.st.Backend, m: m, pool: p, start: time.Now(), turns: m.turns}, model, nil
}

// probeTurn runs the probe turn to its end and frees its upstream session.
func probeTurn(ctx context.Context, slot *turnSlot, model string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ctx, unfence := withFence(ctx, slot)
	defer unfence()
	defer func() { err = fenced(ctx, err) }()
	t := &chat.Turn{RequestID: "probe-" + strconv.FormatInt(time.Now().UnixNano(), 36), Model: model, MaxTokens: 16,
		Messages: []chat.Message{{Role: chat.RoleUser, Content: probePrompt}}}
	a, err := slot.Backend.Start(ctx, t)
	if err != nil {
		return err
	}
	defer a.Close()
	for {
		ev, ok := a.Next()
		switch {
		case !ok:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return chat.ErrWorkerGone
		case ev.Type == chat.EventError:
			return ev.Err
		case ev.Type == chat.EventDone:
			if slot.Backend.Capabilities().Sessions && ev.SessionID != "" {
				dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
				_ = slot.Backend.DeleteSession(dctx, ev.SessionID) // best effort
				dcancel()
			}
			return nil
		}
	}
}
