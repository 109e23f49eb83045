// Package supervisor runs poolgate's worker processes, one per account: it
// starts each through its own worker.Driver (accounts of several kinds
// share one supervisor) and a Launcher, health-checks it,
// restarts it with backoff, drains and stops it on command, and hands a
// logged-out worker to a login runner (its login target). Whether a worker
// takes turns (a rate limit's cooldown, a lease's fence) is not its
// business: it reports health (its state, its last passed check) and obeys
// lifecycle commands. What a kind of worker implements is
// pool/worker's; the supervisor owns only how processes run: Launcher and
// Process.
//
// Each Worker owns its state behind its own lock and reports every change,
// as a Status, to the Supervisor's subscribers; nothing outside the worker
// reads or writes its fields. The admission room (pool/route's Pool) keeps its
// picker's view from those reports and runs turns on the Backend a report
// carries; the cluster (pool/cluster) starts and stops workers through the
// Supervisor's commands. Everything a supervisor calls out to is given at
// construction (Config); it must not know about turns beyond the count a
// drain waits for (Busy), nor about routing, cooldowns, affinity or leases.
package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/worker"
)

// ErrUnknownInstance: no instance has that name.
var ErrUnknownInstance = errors.New("unknown instance")

// Config configures the supervisor and names what it calls out to. Zero
// fields take the defaults noted.
type Config struct {
	// DrainTimeout bounds how long a drain waits for turns (default 15s).
	DrainTimeout time.Duration
	// Busy counts what a drain waits for; nil: a drain does not wait.
	Busy Busy
	// Members are told of every change of the set of workers, the first
	// set included (from New), in this order; SubscribeMembers adds more.
	Members []Members
	// Reports are called with a worker's Status after every change of it,
	// from the goroutine that made the change and without the worker's
	// lock held; they must not block. Reports of one worker may arrive out
	// of order from different goroutines: the higher Seq is the newer.
	Reports []func(Status)
	// Hooks run around each worker's life.
	Hooks Hooks
	// Loginer logs a logged-out worker in when its config says AutoLogin;
	// nil: it stays needs_login until it is logged in by hand.
	Loginer Loginer
}

// Busy tells a drain how much work runs on a worker process: the turns the
// admission room (pool/route's Pool) admitted onto it.
type Busy interface {
	// InFlight returns how many turns run on the named instance, and a
	// channel that is closed when that may have changed.
	InFlight(name string) (n int, changed <-chan struct{})
}

// Hooks are called around a worker's life; each receives the instance's
// login target (account, work dir, and calls into the running worker).
type Hooks struct {
	// PreStart runs before every process start (restore credentials into
	// an empty work dir). An error is logged; the start goes on.
	PreStart func(ctx context.Context, t LoginTarget) error
	// Ready runs, in the background, each time an instance becomes ready
	// (after a start or a login): save its credentials.
	Ready func(ctx context.Context, t LoginTarget)
}

// Supervisor runs a set of workers, in config order. The set changes only
// through Apply (members.go); mu guards it.
type Supervisor struct {
	env     *env
	launch  Launcher
	log     *slog.Logger
	applyMu sync.Mutex // one Apply at a time

	mu      sync.RWMutex
	workers []*Worker
	byName  map[string]*Worker
	runs    map[string]*run // each started worker's loop
	ctx     context.Context // Start's; nil before it
	cancel  context.CancelFunc
	closed  bool // Shutdown began: nothing starts any more
}

// env is what every worker of a supervisor calls out to. It is set up
// before Start and only read after.
type env struct {
	drainTimeout time.Duration
	metrics      *metrics.Metrics
	hooks        Hooks
	loginer      Loginer
	busy         Busy
	subscribers  []func(Status)
	members      []Members
	wg           sync.WaitGroup // the workers' loops and their hooks
}

// notify hands a worker's report to every subscriber.
func (e *env) notify(st Status) {
	for _, fn := range e.subscribers {
		fn(st)
	}
}

// New makes one worker per config, each started by its config's driver,
// and tells cfg.Members of each; nothing starts until Start.
func New(cfg Config, workers []WorkerConfig, launcher Launcher, m *metrics.Metrics, log *slog.Logger) *Supervisor {
	worker.Default(&cfg.DrainTimeout, 15*time.Second)
	s := &Supervisor{byName: map[string]*Worker{}, runs: map[string]*run{}, launch: launcher, log: log,
		env: &env{drainTimeout: cfg.DrainTimeout, metrics: m, hooks: cfg.Hooks, loginer: cfg.Loginer, busy: cfg.Busy,
			subscribers: cfg.Reports, members: cfg.Members}}
	for _, wc := range workers {
		s.add(s.newWorker(wc))
	}
	for _, w := range s.workers {
		for _, mb := range cfg.Members {
			mb.Joined(w)
		}
	}
	return s
}

// newWorker makes a worker of this supervisor and its metric series: every
// instance's series exist from the start, on a single node too (hand-overs
// happen only in a cluster).
func (s *Supervisor) newWorker(wc WorkerConfig) *Worker {
	w := newWorker(wc, s.launch, s.env, s.log)
	if m := s.env.metrics; m != nil {
		m.Restarts.WithLabelValues(w.cfg.Name)
		m.Handovers.WithLabelValues(w.cfg.Name)
	}
	return w
}

// add puts w in the set; s.mu held (or not yet shared).
func (s *Supervisor) add(w *Worker) {
	s.workers = append(s.workers, w)
	s.byName[w.cfg.Name] = w
}

// Start runs every worker's loop until ctx ends or Shutdown.
func (s *Supervisor) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctx, s.cancel = context.WithCancel(ctx)
	for _, w := range s.workers {
		s.startLocked(w)
	}
}

// Shutdown stops every worker process (SIGINT, then SIGKILL), cutting any
// turn still running, and waits for them and their hooks.
func (s *Supervisor) Shutdown() {
	s.mu.Lock()
	s.closed = true
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.env.wg.Wait()
}

// Worker returns the named instance.
func (s *Supervisor) Worker(name string) (*Worker, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	w, ok := s.byName[name]
	return w, ok
}

// Workers returns every instance in config order.
func (s *Supervisor) Workers() []*Worker {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]*Worker(nil), s.workers...)
}

// Names returns every instance's name in config order.
func (s *Supervisor) Names() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]string, len(s.workers))
	for i, w := range s.workers {
		out[i] = w.cfg.Name
	}
	return out
}

// State returns the named instance's state, or ErrUnknownInstance.
func (s *Supervisor) State(name string) (State, error) {
	w, ok := s.Worker(name)
	if !ok {
		return "", ErrUnknownInstance
	}
	return w.Status().State, nil
}

// do runs a command on the named worker.
func (s *Supervisor) do(name string, cmd func(*Worker)) error {
	w, ok := s.Worker(name)
	if !ok {
		return ErrUnknownInstance
	}
	cmd(w)
	return nil
}

// Restart asks the named instance to restart (drain, then start again); a
// stopped or held instance starts.
func (s *Supervisor) Restart(name string) error { return s.do(name, (*Worker).Restart) }

// Drain asks the named instance to finish its turns and stop.
func (s *Supervisor) Drain(name string) error { return s.do(name, (*Worker).Drain) }

// Stop stops the named instance now, cutting its turns (a lost lease must
// not be driven a moment longer); Restart starts it again.
func (s *Supervisor) Stop(name string) error { return s.do(name, (*Worker).Stop) }

// LoginTarget returns the named instance's login target (for the admin API's
// on-demand login).
func (s *Supervisor) LoginTarget(name string) (LoginTarget, error) {
	w, ok := s.Worker(name)
	if !ok {
		return LoginTarget{}, ErrUnknownInstance
	}
	return w.LoginTarget(), nil
}

// LoginPort returns the port where the named instance takes its login
// callback (0 when it is not running), for the admin API's manual fallback.
func (s *Supervisor) LoginPort(name string) (int, error) {
	w, ok := s.Worker(name)
	if !ok {
		return 0, ErrUnknownInstance
	}
	return w.loginPort(), nil
}

// InstanceModels asks the named instance for its model list now: the
// worker's raw payload (nil when its driver can't show it) and the parsed
// list. chat.ErrNoInstance: the instance is not running.
func (s *Supervisor) InstanceModels(ctx context.Context, name string) (json.RawMessage, []chat.Model, error) {
	w, ok := s.Worker(name)
	if !ok {
		return nil, nil, ErrUnknownInstance
	}
	be := w.Status().Backend
	if be == nil {
		return nil, nil, chat.ErrNoInstance
	}
	switch caps := be.Capabilities(); {
	case caps.RawModels:
		return be.RawModels(ctx)
	case caps.Models:
		ms, err := be.Models(ctx)
		return nil, ms, err
	}
	return nil, nil, errors.New("this worker cannot list models")
}

// WaitStopped waits until the named instance is stopped, or until deadline,
// and reports whether it stopped.
func (s *Supervisor) WaitStopped(name string, deadline time.Time) bool {
	w, ok := s.Worker(name)
	if !ok {
		return true
	}
	return w.await(func(st State) bool { return st == StateStopped }, deadline)
}

// await waits until w's state satisfies ok or deadline passes, and says
// which.
func (w *Worker) await(ok func(State) bool, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		st, changed := w.watch()
		if ok(st) {
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		}
	}
}
