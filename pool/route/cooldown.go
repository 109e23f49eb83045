package route

import (
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
)

// Cooldowns are what a rate limit does to an instance: out of rotation until
// the upstream's retry-after (or an exponential guess) has passed and a
// health check passed after it. Whether an instance takes turns is
// admission state, so the cooldown lives on the member; the supervisor only
// checks the worker when asked and reports when the check passed
// (Status.CheckedAt). The operator can end one early, and a probe that
// answers ends it.

// cooldown is a member's rate-limit state; p.mu guards it.
type cooldown struct {
	until time.Time // zero: not cooling down
	// count is the cooldowns since the last good turn, for the
	// exponential guess.
	count int
	// timer asks the worker for a health check when until passes.
	timer *time.Timer
}

// cooling reports whether the member is out of rotation for a rate limit;
// p.mu held.
func (m *member) cooling() bool { return !m.cool.until.IsZero() }

// coolDown takes m out of rotation for d (0: exponential from 5s, doubling
// with each cooldown since the last good turn, up to 5 minutes) and returns
// how long that is.
func (p *Pool) coolDown(m *member, d time.Duration) time.Duration {
	p.mu.Lock()
	if d <= 0 {
		d = min(5*time.Second<<min(m.cool.count, 6), 5*time.Minute)
	}
	m.cool.count++
	m.cool.until = time.Now().Add(d)
	m.cool.stopTimer()
	// The check the timer asks for is what ends the cooldown (observe):
	// the account may answer again, the worker must too.
	m.cool.timer = time.AfterFunc(d, m.w.Check)
	p.mu.Unlock()
	if p.metrics != nil {
		p.metrics.Cooldowns.Inc()
	}
	return d
}

// stopTimer stops a pending health-check request; p.mu held.
func (c *cooldown) stopTimer() {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// endCooldownLocked ends m's cooldown when its time is up and the worker
// passed a health check since (st, its newest report); p.mu held. It
// reports whether it did.
func (m *member) endCooldownLocked(st supervisor.Status) bool {
	if !m.cooling() || st.CheckedAt.Before(m.cool.until) {
		return false
	}
	m.cool.until = time.Time{}
	m.cool.stopTimer()
	return true
}

// clearCooldownLocked puts m back in rotation now and starts its backoff
// over; p.mu held. It reports whether there was a cooldown.
func (m *member) clearCooldownLocked() bool {
	had := m.cooling()
	m.cool.until, m.cool.count = time.Time{}, 0
	m.cool.stopTimer()
	return had
}

// ClearCooldown puts the named instance back in rotation now (and starts its
// cooldown backoff over). It reports whether there was a cooldown;
// supervisor.ErrUnknownInstance for a name the pool does not know.
func (p *Pool) ClearCooldown(name string) (bool, error) {
	p.mu.Lock()
	m, ok := p.byName[name]
	had := ok && m.clearCooldownLocked()
	p.mu.Unlock()
	if !ok {
		return false, supervisor.ErrUnknownInstance
	}
	if had {
		p.log.Info("cooldown cleared", "instance", name)
		p.broadcast()
	}
	return had, nil
}

// turnOK notes a good turn on m: its cooldown backoff starts over.
func (p *Pool) turnOK(m *member) {
	p.mu.Lock()
	m.cool.count = 0
	p.mu.Unlock()
}

// cooldownUntil returns m's cooldown end, nil when it is not cooling down;
// p.mu held.
func (m *member) cooldownUntil() *time.Time {
	if !m.cooling() {
		return nil
	}
	t := m.cool.until
	return &t
}
