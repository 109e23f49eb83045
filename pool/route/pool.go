package route

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
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
}

func (c *Config) fill() {
	worker.Default(&c.MaxInFlight, 64)
	worker.Default(&c.MaxQueue, 256)
	worker.Default(&c.QueueTimeout, 60*time.Second)
	worker.Default(&c.NoInstanceWait, 5*time.Second)
	worker.Default(&c.AffinityWait, 2*time.Second)
}

// Pool admits turns onto the supervisor's workers: it keeps a view of every
// worker from the worker's own reports, counts the turns on each, and hands
// out slots (pick.go).
type Pool struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics.Metrics
	members []*member
	byName  map[string]*member

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced whenever capacity may have freed
	inFlight int
	waiting  int
	closing  bool
	rr       uint64        // round-robin tie breaker
	avgTurn  time.Duration // moving average of turn duration, for Retry-After
	// waitingFor counts the waiting requests by their target (its key),
	// for the Retry-After of those accounts alone.
	waitingFor map[string]int
	cat        atomic.Pointer[catalogue] // the models, rebuilt on change under mu (models.go)
	remote     []chat.Model              // the other replicas' models (SetRemoteModels)
}

// member is the pool's view of one worker; p.mu guards it.
type member struct {
	w        *supervisor.Worker // for its health checks (Check)
	name     string
	account  string
	kind     string                 // the worker's kind (its driver setting)
	check    func(*chat.Turn) error // its driver's bound on a turn; nil: none
	max      int                    // the worker's cap on turns at once
	st       supervisor.Status      // the worker's latest report
	inFlight int
	cool     cooldown  // a rate limit's (cooldown.go)
	fence    time.Time // zero: unfenced; else usable only before it (lease)
	// followUps and reused are the account's series of follow-up turns
	// served and those that continued their upstream session (nil
	// without metrics), looked up once.
	followUps, reused prometheus.Counter
	// fenceTimer cuts the turns still running when the fence passes;
	// turns is the context of the turns admitted before it, ended then
	// (cause errFenced) by cut (fence.go).
	fenceTimer *time.Timer
	turns      context.Context
	cut        context.CancelCauseFunc
	// serving says the member served (took turns or could) at its last
	// look, without a break since since (fence.go).
	serving bool
	since   time.Time
}

// followUp counts a follow-up turn the member served.
func (m *member) followUp(reused bool) {
	if m.followUps == nil {
		return
	}
	m.followUps.Inc()
	if reused {
		m.reused.Inc()
	}
}

// usable reports whether the picker may give this worker a turn; p.mu held.
func (m *member) usable() bool {
	return m.st.State == supervisor.StateReady && m.st.Backend != nil && !m.cooling() && m.leased(time.Now())
}

// New returns an empty pool: it learns of the workers from the supervisor
// made with Watch's config.
func New(cfg Config, m *metrics.Metrics, log *slog.Logger) *Pool {
	cfg.fill()
	p := &Pool{cfg: cfg, log: log, metrics: m, byName: map[string]*member{}, changed: make(chan struct{}),
		avgTurn: 2 * time.Second, waitingFor: map[string]int{}}
	p.rebuildModels()
	return p
}

// Watch returns cfg with the pool in it: told of the supervisor's workers
// (the first set included) and of their every report, and counting the
// turns its drains wait for. The pool is made first and given to the
// supervisor at construction, so that neither needs a setter.
func (p *Pool) Watch(cfg supervisor.Config) supervisor.Config {
	cfg.Busy = p
	cfg.Members = append(cfg.Members, p)
	cfg.Reports = append(cfg.Reports, p.observe)
	return cfg
}

var (
	_ supervisor.Members = (*Pool)(nil)
	_ supervisor.Busy    = (*Pool)(nil)
)

// joinLocked adds a member for w; p.mu held (or the pool not yet shared).
// Its view starts from the worker's status now: a report made before is in
// it, one made after has a higher Seq and is taken by observe.
func (p *Pool) joinLocked(w *supervisor.Worker) {
	mb := &member{w: w, name: w.Name(), account: w.Account(), kind: w.Kind(), max: w.MaxInFlight(), st: w.Status()}
	if c, ok := w.Driver().(worker.TurnChecker); ok {
		mb.check = c.CheckTurn
	}
	if p.metrics != nil {
		mb.followUps = p.metrics.FollowUps.WithLabelValues(mb.account)
		mb.reused = p.metrics.FollowUpsReused.WithLabelValues(mb.account)
	}
	mb.turns, mb.cut = context.WithCancelCause(context.Background())
	mb.look(time.Now())
	p.members = append(p.members, mb)
	p.byName[mb.name] = mb
}

// Joined adds a member for a worker added to the supervisor
// (supervisor.Members).
func (p *Pool) Joined(w *supervisor.Worker) {
	p.mu.Lock()
	if _, ok := p.byName[w.Name()]; !ok {
		p.joinLocked(w)
		p.rebuildModels()
	}
	p.mu.Unlock()
	p.broadcast()
}

// Left drops the member of a worker the supervisor removed
// (supervisor.Members). Its worker was drained first; a turn still holding
// a slot on it (the drain timed out) releases it on the dropped member.
func (p *Pool) Left(name string) {
	p.mu.Lock()
	if m, ok := p.byName[name]; ok {
		m.disarm()
		delete(p.byName, name)
		for i, x := range p.members {
			if x == m {
				p.members = append(p.members[:i:i], p.members[i+1:]...)
				break
			}
		}
		p.rebuildModels()
		p.dropSeries(m.account)
	}
	p.mu.Unlock()
	p.broadcast()
}

// dropSeries removes an account's follow-up series once no member serves
// it, so the series stay bounded by the configuration; p.mu held.
func (p *Pool) dropSeries(account string) {
	if p.metrics == nil {
		return
	}
	for _, m := range p.members {
		if m.account == account {
			return
		}
	}
	p.metrics.FollowUps.DeleteLabelValues(account)
	p.metrics.FollowUpsReused.DeleteLabelValues(account)
}

// observe takes a worker's report into the view.
func (p *Pool) observe(st supervisor.Status) {
	p.mu.Lock()
	m, ok := p.byName[st.Name]
	if !ok || st.Seq <= m.st.Seq {
		p.mu.Unlock()
		return // a report older than the one in the view
	}
	// A worker lists its models once, on its first ready: a list of another
	// length is that one.
	newModels := len(st.Models) != len(m.st.Models)
	now := time.Now()
	m.look(now)
	m.st = st
	m.look(now)
	if newModels {
		p.rebuildModels()
	}
	ended := m.endCooldownLocked(st)
	p.mu.Unlock()
	if ended {
		p.log.Info("cooldown over, back in rotation", "instance", st.Name)
	}
	p.broadcast()
}

// InFlight returns how many turns run on the named instance, and a channel
// closed when that may have changed (supervisor.Busy, for drains).
func (p *Pool) InFlight(name string) (int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m, ok := p.byName[name]; ok {
		return m.inFlight, p.changed
	}
	return 0, p.changed
}

// Shutdown stops admitting and lets turns in flight finish until ctx ends;
// stopping the workers is the supervisor's Shutdown, after this.
func (p *Pool) Shutdown(ctx context.Context) {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.broadcast()
	p.waitIdle(ctx)
}

// Size returns the number of instances.
func (p *Pool) Size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.members)
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

// InstanceStatus is one instance as /internal/pool shows it.
type InstanceStatus struct {
	Name    string `json:"name"`
	Account string `json:"account"`
	// Driver is the instance's kind of worker (its account's driver
	// setting); Models the ids of the models it serves, as listed or
	// configured (none before its worker listed them).
	Driver        string           `json:"driver"`
	Models        []string         `json:"models,omitempty"`
	State         supervisor.State `json:"state"`
	PID           int              `json:"pid"`
	Restarts      int              `json:"restarts"`
	InFlight      int              `json:"in_flight"`
	MaxInFlight   int              `json:"max_in_flight"`
	LastError     string           `json:"last_error"`
	CooldownUntil *time.Time       `json:"cooldown_until"`
	Port          int              `json:"port,omitempty"`
	UptimeSeconds float64          `json:"uptime_seconds"`
	// Serving says the instance takes turns now, or a turn still runs on
	// it: it is ready and, on a replica of a cluster, within the lease the
	// replica holds on its account (cooling down or not). ServingSince is
	// when it last began to, without a break since.
	Serving      bool       `json:"serving"`
	ServingSince *time.Time `json:"serving_since,omitempty"`
	// LeaseUntil is, on a replica of a cluster, when this replica stops
	// trusting its lease on the account (the fence): no turn is admitted
	// or runs on the instance from then on. Absent when none is in force.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// Snapshot is the pool's state at one moment.
type Snapshot struct {
	// At is that moment, the instant the instances' Serving holds at.
	At        time.Time        `json:"at"`
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
	now := time.Now()
	s := Snapshot{At: now, InFlight: p.inFlight, Waiting: p.waiting, Instances: make([]InstanceStatus, 0, len(p.members))}
	for _, m := range p.members {
		st := m.st
		in := InstanceStatus{Name: m.name, Account: st.Account, Driver: m.kind, State: st.State, PID: st.PID,
			Restarts: st.Restarts, InFlight: m.inFlight, MaxInFlight: m.max, LastError: st.LastError}
		for _, md := range st.Models {
			in.Models = append(in.Models, md.ID)
		}
		m.look(now)
		if m.serving {
			since := m.since
			in.Serving, in.ServingSince = true, &since
		}
		if !m.fence.IsZero() && now.Before(m.fence) {
			f := m.fence
			in.LeaseUntil = &f
		}
		in.CooldownUntil = m.cooldownUntil()
		if st.PID != 0 {
			in.Port = st.Port
			in.UptimeSeconds = time.Since(st.StartedAt).Seconds()
		}
		s.Instances = append(s.Instances, in)
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
	if p.anyReadyLocked(nil) {
		return true, ""
	}
	counts := map[supervisor.State]int{}
	for _, m := range p.members {
		counts[m.st.State]++
	}
	return false, "no ready instance: " + describeCounts(counts)
}

func describeCounts(c map[supervisor.State]int) string {
	s := ""
	for _, st := range supervisor.States {
		if c[st] > 0 {
			if s != "" {
				s += ", "
			}
			s += string(st) + "=" + strconv.Itoa(c[st])
		}
	}
	return s
}
