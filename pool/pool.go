package pool

import (
	"context"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
)

// Config configures the pool's admission control. Zero fields take the
// defaults noted.
type Config struct {
	// MaxInFlight caps turns running at once across the pool (default 64).
	MaxInFlight int
	// MaxQueue caps requests waiting for a slot (default 256); beyond it a
	// request is rejected at once with an OverloadedError.
	MaxQueue int
	// QueueTimeout bounds the wait for a slot (default 60s).
	QueueTimeout time.Duration
	// NoInstanceWait bounds the wait when no instance is ready at all, e.g.
	// while workers restart (default 5s); then ErrNoInstance.
	NoInstanceWait time.Duration
	// AffinityWait is how long a follow-up waits for its busy session
	// instance before going elsewhere (default 2s).
	AffinityWait time.Duration
	// DrainTimeout bounds how long a drain waits for turns (default 15s).
	DrainTimeout time.Duration
}

func (c *Config) fill() {
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 64
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 256
	}
	for _, d := range []struct {
		p *time.Duration
		v time.Duration
	}{{&c.QueueTimeout, 60 * time.Second}, {&c.NoInstanceWait, 5 * time.Second},
		{&c.AffinityWait, 2 * time.Second}, {&c.DrainTimeout, 15 * time.Second}} {
		if *d.p <= 0 {
			*d.p = d.v
		}
	}
}

// Pool runs the workers and hands out turn slots on them.
type Pool struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	workers []*Worker
	byName  map[string]*Worker
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	loginer Loginer
	hooks   Hooks

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever capacity may have freed
	inFlight int
	waiting  int
	closing  bool
	rr       uint64        // round-robin tie breaker
	models   []chat.Model  // union of the workers' models (setModels)
	avgTurn  time.Duration // moving average of turn duration, for Retry-After
}

// New builds a pool of one worker per config. Nothing starts until Start.
func New(cfg Config, workers []WorkerConfig, driver Driver, launcher Launcher, m *metrics.Metrics, log *slog.Logger) *Pool {
	cfg.fill()
	p := &Pool{cfg: cfg, log: log, metrics: m, byName: map[string]*Worker{}, changed: make(chan struct{}),
		avgTurn: 2 * time.Second}
	for _, wc := range workers {
		wc.fill()
		w := &Worker{cfg: wc, driver: driver, launcher: launcher, pool: p, state: StateStopped,
			box: newMailbox(), log: log.With("instance", wc.Name)}
		p.workers = append(p.workers, w)
		p.byName[wc.Name] = w
		if m != nil {
			m.Restarts.WithLabelValues(wc.Name)
			m.Handovers.WithLabelValues(wc.Name) // present on a single node too
		}
	}
	return p
}

// Start runs every worker's loop until Shutdown.
func (p *Pool) Start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	for _, w := range p.workers {
		p.wg.Go(func() { w.run(ctx) })
	}
}

// Shutdown stops admitting, lets turns in flight finish until ctx ends, then
// stops every worker process (SIGINT, then SIGKILL) and waits for them.
func (p *Pool) Shutdown(ctx context.Context) {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.broadcast()
	p.waitIdle(ctx)
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

// Worker returns the named instance.
func (p *Pool) Worker(name string) (*Worker, bool) {
	w, ok := p.byName[name]
	return w, ok
}

// Names returns every instance's name in config order.
func (p *Pool) Names() []string {
	out := make([]string, len(p.workers))
	for i, w := range p.workers {
		out[i] = w.cfg.Name
	}
	return out
}

// Size returns the number of instances.
func (p *Pool) Size() int { return len(p.workers) }

// Workers returns every instance in config order.
func (p *Pool) Workers() []*Worker { return p.workers }

// Hooks are called around a worker's life; each receives the instance's
// target (account, work dir, and calls into the running worker).
type Hooks struct {
	// PreStart runs before every process start (restore credentials into
	// an empty work dir). An error is logged; the start goes on.
	PreStart func(ctx context.Context, t LoginTarget) error
	// Ready runs, in the background, each time an instance becomes ready
	// (after a start or a login): save its credentials.
	Ready func(ctx context.Context, t LoginTarget)
}

// SetHooks installs hooks; call before Start.
func (p *Pool) SetHooks(h Hooks) { p.hooks = h }

func (p *Pool) readyHook(ctx context.Context, w *Worker) {
	if p.hooks.Ready == nil {
		return
	}
	t := w.target()
	p.wg.Go(func() { p.hooks.Ready(ctx, t) })
}

// Stop stops the named instance now, cutting its turns (a lost lease must
// not be driven a moment longer); Restart starts it again.
func (p *Pool) Stop(name string) error {
	w, ok := p.byName[name]
	if !ok {
		return ErrUnknownInstance
	}
	w.send(cmdStop)
	return nil
}

// Fence makes the named instance unusable for new turns from until on (the
// end of the lease this replica is sure it holds); zero removes the fence.
func (p *Pool) Fence(name string, until time.Time) {
	w, ok := p.byName[name]
	if !ok {
		return
	}
	p.mu.Lock()
	w.fence = until
	p.mu.Unlock()
	p.broadcast()
}

// Restart asks the named instance to restart (drain, then start again).
func (p *Pool) Restart(name string) error {
	w, ok := p.byName[name]
	if !ok {
		return ErrUnknownInstance
	}
	w.send(cmdRestart)
	return nil
}

// Drain asks the named instance to finish its turns and stop.
func (p *Pool) Drain(name string) error {
	w, ok := p.byName[name]
	if !ok {
		return ErrUnknownInstance
	}
	w.send(cmdDrain)
	return nil
}

// waitIdle waits until no turn is in flight or ctx ends.
func (p *Pool) waitIdle(ctx context.Context) {
	for {
		p.mu.Lock()
		n, ch := p.inFlight, p.changed
		p.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			p.log.Warn("shutdown grace over with turns in flight", "in_flight", n)
			return
		}
	}
}

func (p *Pool) broadcast() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Want says which instance a turn would like.
type Want struct {
	// Prefer names the instance holding the conversation's session.
	Prefer string
	// Hint spreads new conversations stably (rendezvous hash).
	Hint string
	// Exclude lists instances already tried for this request.
	Exclude []string
}

// Slot is one admitted turn on one worker. Release it exactly once.
type Slot struct {
	Worker  *Worker
	Backend Backend
	pool    *Pool
	start   time.Time
	once    sync.Once
}

// Release frees the slot.
func (s *Slot) Release() {
	s.once.Do(func() {
		p := s.pool
		d := time.Since(s.start)
		p.mu.Lock()
		s.Worker.inFlight--
		p.inFlight--
		p.avgTurn = (p.avgTurn*7 + d) / 8
		p.mu.Unlock()
		if p.metrics != nil {
			p.metrics.InFlight.Dec()
		}
		p.broadcast()
	})
}

// Acquire admits a turn: it waits, bounded, for a slot on a usable instance
// and returns it, or an *OverloadedError (queue full or wait too long), or
// ErrNoInstance when nothing is ready.
func (p *Pool) Acquire(ctx context.Context, want Want) (*Slot, error) {
	start := time.Now()
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
		err := p.overloaded("queue full")
		p.mu.Unlock()
		return nil, err
	}
	p.waiting++
	p.gauge()
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.gauge()
		p.mu.Unlock()
	}()
	deadline := time.NewTimer(p.cfg.QueueTimeout)
	defer deadline.Stop()
	for {
		ch := p.changed
		p.mu.Unlock()
		var wake <-chan time.Time
		if want.Prefer != "" || !p.anyReady() {
			wake = time.After(250 * time.Millisecond) // re-evaluate affinity and no-instance limits
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline.C:
			p.mu.Lock()
			err := p.overloaded("timed out waiting for a free instance")
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
		if !p.anyReadyLocked() && waited >= p.cfg.NoInstanceWait && !p.loginPendingLocked() {
			p.mu.Unlock()
			return nil, chat.ErrNoInstance
		}
	}
}

func (p *Pool) admitted(s *Slot, start time.Time, queued bool) *Slot {
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
// divided by the pool's capacity, times the average turn; p.mu held.
func (p *Pool) overloaded(reason string) error {
	capacity := 0
	for _, w := range p.workers {
		if w.usable() {
			capacity += w.cfg.MaxInFlight
		}
	}
	capacity = max(min(capacity, p.cfg.MaxInFlight), 1)
	rounds := time.Duration((p.waiting + capacity) / capacity)
	ra := min(max(p.avgTurn*rounds, time.Second), 5*time.Minute)
	if p.metrics != nil {
		p.metrics.Rejections.Inc()
	}
	return &chat.OverloadedError{RetryAfter: ra, Reason: reason}
}

func (p *Pool) anyReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.anyReadyLocked()
}

// loginPendingLocked reports whether an instance is being logged in: a
// request then waits for it (bounded by the queue timeout) instead of
// failing at once; p.mu held.
func (p *Pool) loginPendingLocked() bool {
	for _, w := range p.workers {
		if w.state == StateNeedsLogin && w.autoLogin() {
			return true
		}
	}
	return false
}

func (p *Pool) anyReadyLocked() bool {
	for _, w := range p.workers {
		if w.usable() {
			return true
		}
	}
	return false
}

// tryPick takes a slot if one is free now; p.mu held. Affinity first (unless
// giveUpPrefer), then the hint's rendezvous choice, then least in-flight.
func (p *Pool) tryPick(want Want, giveUpPrefer bool) *Slot {
	if p.closing || p.inFlight >= p.cfg.MaxInFlight {
		return nil
	}
	free := func(w *Worker) bool {
		if !w.usable() || w.inFlight >= w.cfg.MaxInFlight {
			return false
		}
		for _, x := range want.Exclude {
			if x == w.cfg.Name {
				return false
			}
		}
		return true
	}
	var pick *Worker
	if w, ok := p.byName[want.Prefer]; ok && want.Prefer != "" {
		switch {
		case free(w):
			pick = w
		case w.usable() && !giveUpPrefer:
			return nil // busy: wait a little for the instance that holds the session
		}
	}
	if pick == nil && want.Hint != "" {
		var best uint64
		for _, w := range p.workers {
			if !w.usable() {
				continue
			}
			if s := rendezvous(want.Hint, w.cfg.Name); pick == nil || s > best {
				pick, best = w, s
			}
		}
		if pick != nil && !free(pick) {
			pick = nil
		}
	}
	if pick == nil {
		p.rr++
		n := len(p.workers)
		for i := range n {
			w := p.workers[(int(p.rr)+i)%n]
			if free(w) && (pick == nil || w.inFlight < pick.inFlight) {
				pick = w
			}
		}
	}
	if pick == nil {
		return nil
	}
	pick.inFlight++
	p.inFlight++
	return &Slot{Worker: pick, Backend: pick.backend, pool: p, start: time.Now()}
}

func rendezvous(key, node string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(node))
	return h.Sum64()
}

// InstanceStatus is one instance as /internal/pool shows it.
type InstanceStatus struct {
	Name          string     `json:"name"`
	Account       string     `json:"account"`
	State         State      `json:"state"`
	PID           int        `json:"pid"`
	Restarts      int        `json:"restarts"`
	InFlight      int        `json:"in_flight"`
	MaxInFlight   int        `json:"max_in_flight"`
	LastError     string     `json:"last_error"`
	CooldownUntil *time.Time `json:"cooldown_until"`
	Port          int        `json:"port,omitempty"`
	UptimeSeconds float64    `json:"uptime_seconds"`
}

// Snapshot is the pool's state at one moment.
type Snapshot struct {
	Instances []InstanceStatus `json:"instances"`
	InFlight  int              `json:"in_flight"`
	Waiting   int              `json:"queue_depth"`
}

// Instance returns the named instance's status.
func (s Snapshot) Instance(name string) (InstanceStatus, bool) {
	for _, in := range s.Instances {
		if in.Name == name {
			return in, true
		}
	}
	return InstanceStatus{}, false
}

// Snapshot returns the current state of every instance.
func (p *Pool) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := Snapshot{InFlight: p.inFlight, Waiting: p.waiting, Instances: make([]InstanceStatus, 0, len(p.workers))}
	for _, w := range p.workers {
		st := InstanceStatus{Name: w.cfg.Name, Account: w.cfg.Account.Name, State: w.state, PID: w.pid,
			Restarts: w.restarts, InFlight: w.inFlight, MaxInFlight: w.cfg.MaxInFlight, LastError: w.lastErr}
		if !w.coolUntil.IsZero() {
			t := w.coolUntil
			st.CooldownUntil = &t
		}
		if w.pid != 0 {
			st.Port = w.ep.Port
			st.UptimeSeconds = time.Since(w.startedAt).Seconds()
		}
		s.Instances = append(s.Instances, st)
	}
	return s
}

// Ready reports whether at least one instance can serve, and why not.
func (p *Pool) Ready() (bool, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false, "shutting down"
	}
	if p.anyReadyLocked() {
		return true, ""
	}
	counts := map[State]int{}
	for _, w := range p.workers {
		counts[w.state]++
	}
	return false, "no ready instance: " + describeCounts(counts)
}

func describeCounts(c map[State]int) string {
	s := ""
	for _, st := range States {
		if c[st] > 0 {
			if s != "" {
				s += ", "
			}
			s += string(st) + "=" + strconv.Itoa(c[st])
		}
	}
	return s
}
