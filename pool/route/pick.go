package route

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// Admission and picking: a turn waits, bounded, for a slot on a usable
// instance; the picker prefers the instance that holds the conversation's
// session, then a stable spread of new conversations, then the least busy.

// preference says which instance a turn would like.
type preference struct {
	// Prefer names the instance holding the conversation's session.
	Prefer string
	// Hint spreads new conversations stably (rendezvous hash): the hash of
	// the conversation's hint text (textHint), 0 for none.
	Hint uint64
	// Exclude lists instances already tried for this request.
	Exclude []string
	// Target says which instances serve the request's model (models.go);
	// nil: every instance does.
	Target *target
}

// turnSlot is one admitted turn on one worker; release it exactly once.
type turnSlot struct {
	// Backend is the connection of the worker the turn runs on.
	Backend worker.Backend
	m       *member
	pool    *Pool
	start   time.Time
	once    sync.Once
	// turns ends when the instance's fence passes (fence.go).
	turns context.Context
}

// Instance names the worker the turn runs on.
func (s *turnSlot) Instance() string { return s.m.name }

// release frees the slot.
func (s *turnSlot) release() {
	s.once.Do(func() {
		p := s.pool
		d := time.Since(s.start)
		p.mu.Lock()
		s.m.inFlight--
		s.m.look(time.Now())
		p.inFlight--
		p.avgTurn = (p.avgTurn*7 + d) / 8
		p.mu.Unlock()
		if p.metrics != nil {
			p.metrics.InFlight.Dec()
		}
		p.broadcast()
	})
}

// acquire admits a turn: it waits, bounded, for a slot on a usable instance
// of want's target and returns it, or an *OverloadedError (queue full or
// wait too long), or ErrNoInstance when none of them is ready.
func (p *Pool) acquire(ctx context.Context, want preference) (*turnSlot, error) {
	start := time.Now()
	t := want.Target
	p.mu.Lock()
	if s := p.tryPick(want, false); s != nil {
		p.mu.Unlock()
		return p.admitted(s, start, false), nil
	}
	if p.closing {
		p.mu.Unlock()
		return nil, chat.ErrNoInstance
	}
	if p.waiting >= p.cfg.MaxQueue {
		err := p.overloaded("queue full", t)
		p.mu.Unlock()
		return nil, err
	}
	p.waiting++
	p.waitingFor[t.key()]++
	p.gauge()
	defer func() {
		p.mu.Lock()
		p.waiting--
		if p.waitingFor[t.key()]--; p.waitingFor[t.key()] == 0 {
			delete(p.waitingFor, t.key())
		}
		p.gauge()
		p.mu.Unlock()
	}()
	deadline := time.NewTimer(p.cfg.QueueTimeout)
	defer deadline.Stop()
	for {
		ch := p.changed
		p.mu.Unlock()
		var wake <-chan time.Time
		if want.Prefer != "" || !p.anyReady(t) {
			wake = time.After(250 * time.Millisecond) // re-evaluate affinity and no-instance limits
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			p.mu.Lock()
			err := p.overloaded("timed out waiting for a free instance", t)
			p.mu.Unlock()
			return nil, err
		case <-ch:
		case <-wake:
		}
		waited := time.Since(start)
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			return nil, chat.ErrNoInstance
		}
		if s := p.tryPick(want, waited >= p.cfg.AffinityWait); s != nil {
			p.mu.Unlock()
			return p.admitted(s, start, true), nil
		}
		if !p.anyReadyLocked(t) && waited >= p.cfg.NoInstanceWait && !p.loginPendingLocked(t) {
			err := p.noInstanceLocked(t)
			p.mu.Unlock()
			return nil, err
		}
	}
}

func (p *Pool) admitted(s *turnSlot, start time.Time, queued bool) *turnSlot {
	if p.metrics != nil {
		p.metrics.InFlight.Inc()
		if queued {
			p.metrics.QueueWait.Observe(time.Since(start).Seconds())
		}
	}
	return s
}

func (p *Pool) gauge() {
	if p.metrics != nil {
		p.metrics.QueueDepth.Set(float64(p.waiting))
	}
}

// overloaded builds the rejection with an honest Retry-After: the queue ahead
// for t's instances divided by their capacity, times the average turn;
// p.mu held.
func (p *Pool) overloaded(reason string, t *target) error {
	capacity := 0
	for _, m := range p.members {
		if m.usable() && t.admits(m, p.cat.Load()) {
			capacity += m.max
		}
	}
	capacity = max(min(capacity, p.cfg.MaxInFlight), 1)
	rounds := time.Duration((p.waitingFor[t.key()] + capacity) / capacity)
	ra := min(max(p.avgTurn*rounds, time.Second), 5*time.Minute)
	if p.metrics != nil {
		p.metrics.Rejections.Inc()
	}
	return &chat.OverloadedError{RetryAfter: ra, Reason: reason}
}

// anyReady reports whether an instance of t (nil: any) can take a turn.
func (p *Pool) anyReady(t *target) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.anyReadyLocked(t)
}

// loginPendingLocked reports whether an instance of t is being logged in:
// a request then waits for it (bounded by the queue timeout) instead of
// failing at once; p.mu held.
func (p *Pool) loginPendingLocked(t *target) bool {
	for _, m := range p.members {
		if m.st.LoginPending && t.admits(m, p.cat.Load()) {
			return true
		}
	}
	return false
}

// errLoggedOut: nothing can serve because every account needs a login and
// none is under way. It is ErrNoInstance (what the pool lacks) and
// ErrNotLoggedIn (why), so that the caller is told the reason.
var errLoggedOut = fmt.Errorf("%w: %w: every account needs a login", chat.ErrNoInstance, chat.ErrNotLoggedIn)

// noInstanceLocked is the error of t's instances with nothing ready;
// p.mu held.
func (p *Pool) noInstanceLocked(t *target) error {
	n := 0
	for _, m := range p.members {
		if !t.admits(m, p.cat.Load()) {
			continue
		}
		if n++; m.st.State != supervisor.StateNeedsLogin {
			return chat.ErrNoInstance
		}
	}
	if n == 0 {
		return chat.ErrNoInstance
	}
	return errLoggedOut
}

func (p *Pool) anyReadyLocked(t *target) bool {
	for _, m := range p.members {
		if m.usable() && t.admits(m, p.cat.Load()) {
			return true
		}
	}
	return false
}

// sizeFor counts t's instances (nil: every instance).
func (p *Pool) sizeFor(t *target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, m := range p.members {
		if t.admits(m, p.cat.Load()) {
			n++
		}
	}
	return n
}

// allUsableExcludedLocked reports whether some instance of t is usable and
// every usable one is in exclude; p.mu held.
func (p *Pool) allUsableExcludedLocked(t *target, exclude []string) bool {
	if len(exclude) == 0 {
		return false
	}
	found := false
	for _, m := range p.members {
		if !m.usable() || !t.admits(m, p.cat.Load()) {
			continue
		}
		if !slices.Contains(exclude, m.name) {
			return false
		}
		found = true
	}
	return found
}

// Serves reports whether the named instance takes new turns on this
// replica now: it is ready, not cooling down and not fenced.
func (p *Pool) Serves(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.byName[name]
	return ok && m.usable()
}

// tryPick takes a slot if one is free now; p.mu held. Affinity first (unless
// giveUpPrefer), then the hint's rendezvous choice, then least in-flight.
func (p *Pool) tryPick(want preference, giveUpPrefer bool) *turnSlot {
	if p.closing || p.inFlight >= p.cfg.MaxInFlight {
		return nil
	}
	exclude, t := want.Exclude, want.Target
	if p.allUsableExcludedLocked(t, exclude) {
		// Every instance that serves here now was tried: the ones usable
		// again are new processes (after a restart or a lease taken back),
		// or the only ones there are. Waiting for another would wait for
		// ever when this replica leases fewer accounts than the pool has.
		exclude = nil
	}
	serves := func(m *member) bool { return m.usable() && t.admits(m, p.cat.Load()) }
	free := func(m *member) bool {
		if !serves(m) || m.inFlight >= m.max {
			return false
		}
		for _, x := range exclude {
			if x == m.name {
				return false
			}
		}
		return true
	}
	var pick *member
	if m, ok := p.byName[want.Prefer]; ok && want.Prefer != "" {
		switch {
		case free(m):
			pick = m
		case serves(m) && !giveUpPrefer:
			return nil // busy: wait a little for the instance that holds the session
		}
	}
	if pick == nil && want.Hint != 0 {
		var best uint64
		for _, m := range p.members {
			if !serves(m) {
				continue
			}
			if s := rendezvous(want.Hint, m.name); pick == nil || s > best {
				pick, best = m, s
			}
		}
		if pick != nil && !free(pick) {
			pick = nil
		}
	}
	if pick == nil {
		p.rr++
		n := len(p.members)
		for i := range n {
			m := p.members[(int(p.rr)+i)%n]
			if free(m) && (pick == nil || m.inFlight < pick.inFlight) {
				pick = m
			}
		}
	}
	if pick == nil {
		return nil
	}
	pick.inFlight++
	p.inFlight++
	return &turnSlot{Backend: pick.st.Backend, m: pick, pool: p, start: time.Now(), turns: pick.turns}
}

// hintSeed seeds the spread hints: a hint is stable for the life of the
// process, which is what spreading new conversations needs (no replica or
// store keeps one).
var hintSeed = maphash.MakeSeed()

// textHint hashes the parts written one after the other. maphash reads a
// large system prompt at memory speed and copies none of it.
func textHint(parts ...string) uint64 {
	var h maphash.Hash
	h.SetSeed(hintSeed)
	for _, p := range parts {
		_, _ = h.WriteString(p) // never fails
	}
	return h.Sum64()
}

// rendezvous is the score of node for a hint: the hint and the node's name
// mixed (splitmix64's finalizer), so each hint ranks the nodes its own way.
func rendezvous(hint uint64, node string) uint64 {
	z := hint ^ maphash.String(hintSeed, node)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
