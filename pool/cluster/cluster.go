// Package cluster is everything a replica does to share the accounts with
// the other replicas of one deployment: the leases that let at most one
// replica drive an account (with fencing tokens), the balancing of accounts
// between the live replicas, the gate that holds automatic logins back until
// a replica keeps an account, the replica registry (heartbeats), the answer
// to "which replica serves this account" the router forwards by, the hop
// headers of a forwarded request, and the Redis store of leases and the
// registry. It steers the supervisor's workers (start, drain, stop) and the
// admission room's fences through small interfaces; it must not run turns,
// pick workers or touch conversation state. A single node runs without it.
package cluster

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// Store is the shared state replicas coordinate through (Redis).
// Lease calls must fail, never pretend, when the store is unreachable, each
// within a bounded time of its own (renewals are not given a shared
// deadline), and after the store lost its data it admits no new owner for
// one lease TTL (RedisStore does all three).
type Store interface {
	AcquireLease(ctx context.Context, account, holder string, ttl time.Duration) (Lease, bool, error)
	RenewLease(ctx context.Context, account, holder string, token int64, ttl time.Duration) (Lease, error)
	ReleaseLease(ctx context.Context, account, holder string, token int64) error
	Leases(ctx context.Context, accounts []string) ([]Lease, error)
	Heartbeat(ctx context.Context, r Replica, ttl time.Duration) error
	Replicas(ctx context.Context) ([]Replica, error)
	LeaveCluster(ctx context.Context, id string) error
}

// Workers is what the cluster starts and stops: the supervisor
// (*supervisor.Supervisor), whose workers must be configured Held.
type Workers interface {
	// Names lists every instance; an instance's name is its account's.
	Names() []string
	Restart(name string) error
	Drain(name string) error
	Stop(name string) error
	// WaitStopped waits until the instance is stopped or deadline passes.
	WaitStopped(name string, deadline time.Time) bool
}

// Admission is what the cluster fences and reads the load of: the admission
// room (*route.Pool).
type Admission interface {
	// Fence makes the instance unusable for new turns from until on.
	Fence(name string, until time.Time)
	Snapshot() route.Snapshot
	// LocalModels are the models this replica's accounts list;
	// SetRemoteModels gives it those of the other replicas'.
	LocalModels() []chat.Model
	SetRemoteModels(ms []chat.Model)
}

// Config configures a replica's part in the cluster.
type Config struct {
	// ID names this replica run (required): unique per process start, so a
	// restarted replica never renews the lease of its predecessor.
	ID string
	// URL is where other replicas reach this one (POOLGATE_ADVERTISE_URL).
	URL string
	// LeaseTTL is how long a lease lives without renewal (default 15s).
	LeaseTTL time.Duration
	// MaxAccounts caps the accounts this replica holds (default: its fair
	// share, accounts / live replicas rounded up).
	MaxAccounts int
	// DrainTimeout bounds the graceful hand-over of a surplus account
	// (default 15s, and never past the lease).
	DrainTimeout time.Duration
	// Logins is the gate the supervisor's automatic logins go through
	// (gate.go); New binds it to the cluster. Nil: no automatic logins.
	Logins *LoginGate
}

// Cluster holds this replica's accounts: it acquires, renews and releases
// leases, fences workers to the lease it is sure of, and answers which
// replica serves an account. Only its Run loop changes what it holds (its
// fence loop only lets go of what it can no longer trust).
type Cluster struct {
	cfg     Config
	workers Workers
	adm     Admission
	m       *metrics.Metrics
	store   Store
	log     *slog.Logger

	mu     sync.Mutex
	held   map[string]*heldLease
	leases map[string]Lease // last view of every account's lease
	seen   map[string]seenLease
	// quarantine is the end of the lease store's quarantine, as the last
	// acquisition refused during one said.
	quarantine time.Time
	replicas   map[string]Replica
	releasing  map[string]bool
	// settled: the last balance found nothing to give away, so the accounts
	// held now are kept (automatic logins wait for it: gate.go).
	settled bool
	// fenceMoved wakes the fence loop when a lease's deadline was set
	// (hold.go).
	fenceMoved chan struct{}
}

type heldLease struct {
	token int64
	valid time.Time // this replica may serve the account until then
}

// New returns the coordinator for the workers' accounts. The workers must
// be configured Held: the cluster starts the ones it wins. m may be nil.
func New(cfg Config, workers Workers, adm Admission, store Store, m *metrics.Metrics, log *slog.Logger) *Cluster {
	worker.Default(&cfg.LeaseTTL, 15*time.Second)
	worker.Default(&cfg.DrainTimeout, 15*time.Second)
	// No account is leased yet: a worker started by anything but a won
	// lease (a stray admin restart) must not take turns.
	for _, name := range workers.Names() {
		adm.Fence(name, notLeased)
	}
	c := &Cluster{cfg: cfg, workers: workers, adm: adm, m: m, store: store, log: log.With("replica", cfg.ID),
		held: map[string]*heldLease{}, leases: map[string]Lease{}, replicas: map[string]Replica{},
		releasing: map[string]bool{}, fenceMoved: make(chan struct{}, 1)}
	if cfg.Logins != nil {
		cfg.Logins.c.Store(c)
	}
	return c
}

// notLeased is the fence of a worker whose lease this replica never held: a
// moment long past.
var notLeased = time.Unix(1, 0)

// ID returns this replica run's id.
func (c *Cluster) ID() string { return c.cfg.ID }

// margin is how long before the lease's end this replica stops serving: it
// covers the time a renewal takes and clock-rate drift.
func (c *Cluster) margin() time.Duration { return c.cfg.LeaseTTL / 5 }

func (c *Cluster) interval() time.Duration { return c.cfg.LeaseTTL / 5 }

// Leave releases every lease and deregisters; call after the pool stopped.
func (c *Cluster) Leave(ctx context.Context) {
	c.mu.Lock()
	held := c.held
	c.held = map[string]*heldLease{}
	c.mu.Unlock()
	for name, h := range held {
		if err := c.store.ReleaseLease(ctx, name, c.cfg.ID, h.token); err != nil {
			c.log.Warn("release lease on shutdown", "account", name, "err", err)
		}
	}
	if err := c.store.LeaveCluster(ctx, c.cfg.ID); err != nil {
		c.log.Warn("leave cluster", "err", err)
	}
}

func (c *Cluster) heartbeat(ctx context.Context) {
	snap := c.adm.Snapshot()
	r := Replica{ID: c.cfg.ID, URL: c.cfg.URL, InFlight: snap.InFlight, Queue: snap.Waiting,
		MaxAccounts: c.cfg.MaxAccounts, Models: c.adm.LocalModels()}
	c.mu.Lock()
	r.Accounts = slices.Sorted(maps.Keys(c.held))
	c.mu.Unlock()
	for _, in := range snap.Instances {
		if in.State == supervisor.StateReady {
			r.Capacity += in.MaxInFlight
			for _, id := range in.Models {
				if !slices.Contains(r.Serving, id) {
					r.Serving = append(r.Serving, id)
				}
			}
		}
	}
	if err := c.store.Heartbeat(ctx, r, c.cfg.LeaseTTL); err != nil {
		c.log.Warn("heartbeat", "err", err)
	}
}

func (c *Cluster) refresh(ctx context.Context) error {
	names := c.workers.Names()
	leases, err := c.store.Leases(ctx, names)
	if err != nil {
		return err
	}
	reps, err := c.store.Replicas(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leases = map[string]Lease{}
	if c.seen == nil {
		c.seen = map[string]seenLease{}
	}
	now := time.Now()
	for i, l := range leases {
		c.leases[names[i]] = l
		c.noteLease(names[i], l, now)
	}
	c.replicas = map[string]Replica{}
	var remote []chat.Model
	// In one order every time, so an unchanged cluster leaves the pool's
	// model list alone.
	slices.SortFunc(reps, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	for _, r := range reps {
		c.replicas[r.ID] = r
		if r.ID != c.cfg.ID {
			remote = append(remote, r.Models...)
		}
	}
	c.adm.SetRemoteModels(remote)
	return nil
}

// Holder reports whether this replica holds the account's lease now (and
// may act on it), else the URL of the replica that holds it ("" when none
// does, as far as the last view of the lease table knows).
func (c *Cluster) Holder(account string) (local bool, url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h, ok := c.held[account]; ok && !c.releasing[account] && time.Now().Before(h.valid) {
		return true, ""
	}
	l := c.leases[account]
	if l.Holder == "" || l.Holder == c.cfg.ID {
		return false, ""
	}
	if r, ok := c.replicas[l.Holder]; ok {
		return false, r.URL
	}
	return false, ""
}

// Token returns the fencing token of this replica's lease on account, and
// false when it holds none it can trust now.
func (c *Cluster) Token(account string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.held[account]
	if !ok || !time.Now().Before(h.valid) {
		return 0, false
	}
	return h.token, true
}

// Owner returns the URL of the other replica that holds the account.
func (c *Cluster) Owner(account string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.leases[account]
	if l.Holder == "" || l.Holder == c.cfg.ID {
		return "", false
	}
	r, ok := c.replicas[l.Holder]
	return r.URL, ok && r.URL != ""
}

// Spare returns another replica with free capacity whose ready accounts
// serve the model ("": any), as far as the heartbeats say, for a new
// conversation this replica can't serve.
func (c *Cluster) Spare(model string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	best, bestFree := "", 0
	for id, r := range c.replicas {
		if id == c.cfg.ID || r.URL == "" {
			continue
		}
		// A replica that lists no models (its accounts have listed none
		// yet) is not ruled out for one.
		if model != "" && len(r.Models) > 0 && !slices.Contains(r.Serving, model) {
			continue
		}
		if free := r.Capacity - r.InFlight - r.Queue; free > bestFree {
			best, bestFree = r.URL, free
		}
	}
	return best, best != ""
}

// Status is the cluster as /internal/cluster shows it.
type Status struct {
	Self     string           `json:"self"`
	Replicas []Replica        `json:"replicas"`
	Leases   []Lease          `json:"leases"`
	Held     map[string]int64 `json:"held"`
	// LeaseSince is when this replica first saw each account's current
	// holder and token (the lease's age, to within one refresh).
	LeaseSince map[string]time.Time `json:"lease_since"`
	// Handovers counts the changes of each account's holder this replica
	// has seen since it started.
	Handovers map[string]int `json:"handovers"`
	// QuarantineUntil is the end of the lease store's quarantine (after
	// Redis lost its data, or at a cluster's first start) while it lasts.
	QuarantineUntil *time.Time `json:"quarantine_until,omitempty"`
}

// seenLease is an account's holder as this replica last saw it.
type seenLease struct {
	holder    string
	token     int64
	since     time.Time
	handovers int
}

// noteLease records a refreshed view of account's lease; c.mu is held.
func (c *Cluster) noteLease(account string, l Lease, now time.Time) {
	prev, ok := c.seen[account]
	if ok && prev.holder == l.Holder && prev.token == l.Token {
		return
	}
	next := seenLease{holder: l.Holder, token: l.Token, since: now, handovers: prev.handovers}
	if ok && prev.holder != "" && l.Holder != "" && prev.holder != l.Holder {
		next.handovers++
	}
	if l.Holder == "" && prev.holder != "" {
		next.holder = prev.holder // a free lease between two holders: the hand-over counts when the next takes it
		next.token = prev.token
	}
	c.seen[account] = next
}

// Status returns this replica's view of the cluster.
func (c *Cluster) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Status{Self: c.cfg.ID, Held: map[string]int64{}, LeaseSince: map[string]time.Time{}, Handovers: map[string]int{}}
	for name, seen := range c.seen {
		s.Handovers[name] = seen.handovers
		if l := c.leases[name]; l.Holder != "" && l.Holder == seen.holder {
			s.LeaseSince[name] = seen.since
		}
	}
	if time.Now().Before(c.quarantine) {
		q := c.quarantine
		s.QuarantineUntil = &q
	}
	for _, r := range c.replicas {
		s.Replicas = append(s.Replicas, r)
	}
	sort.Slice(s.Replicas, func(i, j int) bool { return s.Replicas[i].ID < s.Replicas[j].ID })
	for name, l := range c.leases {
		l.Account = name
		s.Leases = append(s.Leases, l)
	}
	sort.Slice(s.Leases, func(i, j int) bool { return s.Leases[i].Account < s.Leases[j].Account })
	for name, h := range c.held {
		s.Held[name] = h.token
	}
	return s
}
