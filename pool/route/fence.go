package route

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Lease fences. On a replica of a cluster each instance is fenced to the
// lease the replica holds on its account (pool/cluster): the fence is the
// moment from which the replica can no longer be sure the lease is still its
// own, and by then it must have stopped serving the account, or two replicas
// could drive it at once. The admission room keeps both halves of that
// itself, on its own timer, whatever the cluster's loop is waiting for (a
// slow or failing-over Redis, a starved machine): no turn is admitted from
// the fence on, and a turn still running when the fence passes is cut then
// (its context ends with errFenced), not when the worker is stopped, which
// may wait behind a health check.
//
// Each member also keeps the stretch of time it has served without a break
// (took turns, or could), which Snapshot reports with the instant it was
// taken: one account's stretches on two replicas must never overlap, and
// that can be checked from snapshots taken at different times.

// errFenced ends a turn still running when its instance's fence passed. It
// is ErrWorkerGone to the caller: the turn is retried elsewhere when
// nothing was sent yet.
var errFenced = fmt.Errorf("%w: this replica's lease on the account ended", chat.ErrWorkerGone)

// Fence makes the named instance unusable from until on (the end of the
// lease this replica is sure it holds): no new turn is admitted then, and
// the turns still running are cut. A fence already past cuts them now; zero
// removes the fence (a single node).
func (p *Pool) Fence(name string, until time.Time) {
	p.mu.Lock()
	m, ok := p.byName[name]
	if ok {
		now := time.Now()
		m.look(now)
		m.fence = until
		p.armLocked(m, now)
		m.look(now)
	}
	p.mu.Unlock()
	if ok {
		p.broadcast()
	}
}

// leased reports whether the member's fence lets it serve at now.
func (m *member) leased(now time.Time) bool { return m.fence.IsZero() || now.Before(m.fence) }

// servingAt reports whether the member serves at now: it may take a turn
// (ready, connected, within its fence; a cooldown does not count, the
// account is still this replica's) or one still runs on it; p.mu held.
func (m *member) servingAt(now time.Time) bool {
	return m.inFlight > 0 || m.st.State == supervisor.StateReady && m.st.Backend != nil && m.leased(now)
}

// look brings the serving stretch up to now; p.mu held. Call it before and
// after every change of what servingAt reads: between changes only the
// passing of the fence can end a stretch and nothing can begin one, so the
// look before a change closes a stretch the fence ended, and the one after
// dates a new stretch exactly.
func (m *member) look(now time.Time) {
	s := m.servingAt(now)
	if s && !m.serving {
		m.since = now
	}
	m.serving = s
}

// armLocked sets the timer that cuts the member's turns at its fence, or
// cuts them now if the fence has passed; p.mu held.
func (p *Pool) armLocked(m *member, now time.Time) {
	if m.fenceTimer != nil {
		m.fenceTimer.Stop()
		m.fenceTimer = nil
	}
	switch {
	case m.fence.IsZero():
	case now.Before(m.fence):
		m.fenceTimer = time.AfterFunc(m.fence.Sub(now), func() { p.fenceReached(m) })
	default:
		m.cutLocked()
	}
}

// fenceReached runs when a member's fence may have passed; it may have
// moved on meanwhile (a renewal), and then leaves the turns alone.
func (p *Pool) fenceReached(m *member) {
	p.mu.Lock()
	now := time.Now()
	passed := !m.leased(now)
	if passed {
		m.cutLocked()
		m.look(now)
	}
	p.mu.Unlock()
	if passed {
		p.broadcast()
	}
}

// cutLocked ends the turns admitted under the fence that passed; turns
// admitted under a later fence get a new context. p.mu held.
func (m *member) cutLocked() {
	m.cut(errFenced)
	m.turns, m.cut = context.WithCancelCause(context.Background())
}

// disarm stops the fence timer of a member leaving the pool; p.mu held.
func (m *member) disarm() {
	if m.fenceTimer != nil {
		m.fenceTimer.Stop()
	}
	m.cool.stopTimer()
}

// withFence returns ctx, ended also when the slot's instance's fence passes
// (cause errFenced), and the function that releases it.
func withFence(ctx context.Context, s *turnSlot) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.turns, func() { cancel(context.Cause(s.turns)) })
	return tctx, func() {
		stop()
		cancel(nil)
	}
}

// fenced returns errFenced if the turn's context ended because its
// instance's fence passed, and err otherwise: the worker's own account of
// a cut turn is only that it was cancelled.
func fenced(tctx context.Context, err error) error {
	if c := context.Cause(tctx); errors.Is(c, errFenced) {
		return c
	}
	return err
}
