package supervisor

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// State is an instance's life-cycle state as users see it.
type State string

// Instance states.
const (
	StateStarting   State = "starting"
	StateReady      State = "ready"
	StateUnhealthy  State = "unhealthy"
	StateNeedsLogin State = "needs_login"
	StateBackoff    State = "backoff"
	StateDraining   State = "draining"
	StateStopped    State = "stopped"
	// StateFailed: the worker's starts failed the same way FailAfter times
	// in a row (failed.go); it waits for a restart.
	StateFailed State = "failed"
)

// States lists every state, for metrics that pre-initialise their labels.
var States = []State{StateStarting, StateReady, StateUnhealthy, StateNeedsLogin, StateBackoff, StateDraining, StateStopped,
	StateFailed}

// WorkerConfig configures one worker. Zero fields take the defaults noted.
type WorkerConfig struct {
	// Name is the instance name (default: the account name).
	Name    string
	Account worker.Account
	// Driver starts the worker's process and connects to it (required).
	Driver worker.Driver
	// Kind names the worker's kind (its account's driver setting), for
	// those who route by it; the supervisor only carries it.
	Kind string
	// Models are the models the account serves as configured, reported
	// in place of the worker's own list (nil: the worker's list).
	Models []chat.Model
	// WorkDir is the worker's own directory (required).
	WorkDir string
	// MaxInFlight is the per-instance cap on concurrent turns (default 1:
	// one turn at a time, as a driver's agent worker takes them). The
	// supervisor only carries it to the admission room, which enforces it.
	MaxInFlight int
	// StartTimeout bounds process start to readiness (default 20s).
	StartTimeout time.Duration
	// HealthInterval is the time between health checks (default 5s).
	HealthInterval time.Duration
	// HealthTimeout bounds one health check (default 3s).
	HealthTimeout time.Duration
	// UnhealthyAfter consecutive failed checks restart the worker (default 3).
	UnhealthyAfter int
	// BackoffMin and BackoffMax bound the restart backoff (default 500ms, 30s).
	BackoffMin, BackoffMax time.Duration
	// StableAfter of uptime resets the backoff (default 60s).
	StableAfter time.Duration
	// FailAfter starts in a row that fail the same way mark the worker
	// failed instead of restarting it again (default 5).
	FailAfter int
	// StopGrace is the wait between SIGINT and SIGKILL (default 3s).
	StopGrace time.Duration
	// AutoLogin hands a logged-out worker to the supervisor's Loginer
	// (default off here; the daemon turns it on from POOLGATE_AUTO_LOGIN).
	AutoLogin bool
	// Recipe names the account's login recipe ("" = the default).
	Recipe string
	// Held keeps the worker stopped until Restart starts it (a replica
	// runs only the accounts it holds a lease for).
	Held bool
}

func (c *WorkerConfig) fill() {
	c.Name = cmp.Or(c.Name, c.Account.Name)
	worker.Default(&c.MaxInFlight, 1)
	worker.Default(&c.UnhealthyAfter, 3)
	worker.Default(&c.FailAfter, 5)
	worker.Default(&c.StartTimeout, 20*time.Second)
	worker.Default(&c.HealthInterval, 5*time.Second)
	worker.Default(&c.HealthTimeout, 3*time.Second)
	worker.Default(&c.BackoffMin, 500*time.Millisecond)
	worker.Default(&c.BackoffMax, 30*time.Second)
	worker.Default(&c.StableAfter, 60*time.Second)
	worker.Default(&c.StopGrace, 3*time.Second)
}

// Status is a worker's state at one moment, as it reports it.
type Status struct {
	Name    string
	Account string
	State   State
	// PID is the process's id (0 when none runs); Port its main port while
	// it runs.
	PID  int
	Port int
	// Restarts counts the starts after the first.
	Restarts  int
	LastError string
	// CheckedAt is when the worker last passed a health check (zero
	// before the first). A check asked for with Check is reported as soon
	// as it passes, changed or not, so whoever asked learns that it did.
	CheckedAt time.Time
	// StartedAt is when the running process answered its first check.
	StartedAt time.Time
	// Backend is the connected worker to run turns on; nil unless a
	// process runs and answered.
	Backend worker.Backend
	// Models is the worker's model list (fetched once, on its first ready).
	Models []chat.Model
	// LoginPending: the worker is logged out and a login runner will log it
	// in, so a request may wait for it.
	LoginPending bool
	// Seq orders one worker's reports: a higher Seq is a newer report.
	Seq uint64
}

// Worker supervises one account's worker process. It owns its state: its
// run loop changes it, the methods below ask for changes, and every change
// is reported to the supervisor's subscribers. Only mu guards the fields
// after it.
type Worker struct {
	cfg      WorkerConfig
	driver   worker.Driver
	launcher Launcher
	env      *env
	log      *slog.Logger
	box      mailbox

	mu        sync.Mutex
	seq       uint64
	changed   chan struct{} // closed and replaced at every change
	state     State
	pid       int
	restarts  int
	lastErr   string
	backend   worker.Backend
	checkedAt time.Time // the last passed health check
	startedAt time.Time
	ep        worker.Endpoint
	models    []chat.Model
	released  chan struct{} // closed when this run is ended on purpose (LoginTarget.Released)
}

func newWorker(wc WorkerConfig, launcher Launcher, e *env, log *slog.Logger) *Worker {
	wc.fill()
	return &Worker{cfg: wc, driver: wc.Driver, launcher: launcher, env: e, log: log.With("instance", wc.Name),
		box: newMailbox(), state: StateStopped, changed: make(chan struct{})}
}

// Name returns the instance name.
func (w *Worker) Name() string { return w.cfg.Name }

// Account returns the account name.
func (w *Worker) Account() string { return w.cfg.Account.Name }

// Kind returns the worker's kind (WorkerConfig.Kind).
func (w *Worker) Kind() string { return w.cfg.Kind }

// Driver returns the driver that runs the worker.
func (w *Worker) Driver() worker.Driver { return w.cfg.Driver }

// Username returns the instance's login name ("" when it has none).
func (w *Worker) Username() string { return w.cfg.Account.Username }

// WorkDir returns the worker's directory.
func (w *Worker) WorkDir() string { return w.cfg.WorkDir }

// MaxInFlight returns the instance's cap on concurrent turns.
func (w *Worker) MaxInFlight() int { return w.cfg.MaxInFlight }

// Restart asks the worker to restart (drain, then start again); a stopped
// or held worker starts.
func (w *Worker) Restart() { w.box.post(cmdRestart) }

// Drain asks the worker to finish its turns and stop.
func (w *Worker) Drain() { w.box.post(cmdDrain) }

// Stop stops the worker now, cutting its turns.
func (w *Worker) Stop() { w.box.post(cmdStop) }

// Check asks the worker to check its health and login now, not at the next
// tick (a turn found it gone or logged out).
func (w *Worker) Check() { w.box.post(cmdCheck) }

// Status returns the worker's state now.
func (w *Worker) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.statusLocked()
}

func (w *Worker) statusLocked() Status {
	st := Status{Name: w.cfg.Name, Account: w.cfg.Account.Name, State: w.state, PID: w.pid, Restarts: w.restarts,
		LastError: w.lastErr, CheckedAt: w.checkedAt, StartedAt: w.startedAt, Backend: w.backend,
		Models: w.models, LoginPending: w.state == StateNeedsLogin && w.autoLogin(), Seq: w.seq}
	if w.cfg.Models != nil {
		st.Models = w.cfg.Models // the configured list stands; the worker's is never asked for
	}
	if w.pid != 0 {
		st.Port = w.ep.Port
	}
	return st
}

// watch returns the state now and a channel closed at the next change.
func (w *Worker) watch() (State, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state, w.changed
}

// update applies change under the lock, then reports the new state.
func (w *Worker) update(change func()) {
	w.updateIf(func() bool { change(); return true })
}

// updateIf applies change under the lock and reports the new state if change
// says it changed anything.
func (w *Worker) updateIf(change func() bool) {
	w.mu.Lock()
	if !change() {
		w.mu.Unlock()
		return
	}
	w.seq++
	st := w.statusLocked()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.env.notify(st)
}

// run is the worker's whole life; it returns when ctx ends, with the process
// stopped.
func (w *Worker) run(ctx context.Context) {
	backoff := w.cfg.BackoffMin
	held := w.cfg.Held
	var fails failures
	for {
		if held {
			w.set(StateStopped, nil)
			select {
			case <-ctx.Done():
				return
			case <-w.box.wake:
				if w.box.take() != cmdRestart {
					continue
				}
				held = false
			}
		}
		started := time.Now()
		next, err := w.life(ctx)
		if ctx.Err() != nil {
			w.set(StateStopped, nil)
			return
		}
		switch next {
		case cmdDrain, cmdStop:
			held, fails = true, failures{}
			continue
		case cmdRestart:
			backoff, fails = w.cfg.BackoffMin, failures{}
			w.countRestart()
			continue
		}
		if time.Since(started) >= w.cfg.StableAfter {
			backoff = w.cfg.BackoffMin
		}
		var gaveUp bool
		if err, gaveUp = fails.count(err, w.cfg.FailAfter); gaveUp {
			if !w.failed(ctx, err, &held) {
				w.set(StateStopped, nil)
				return
			}
			backoff, fails = w.cfg.BackoffMin, failures{}
			if !held {
				w.countRestart()
			}
			continue
		}
		w.set(StateBackoff, err)
		d := backoff/2 + rand.N(backoff/2+1) // jitter in [b/2, b]
		backoff = min(backoff*2, w.cfg.BackoffMax)
		w.log.Warn("worker down, restarting after backoff", "err", err, "backoff", d)
		if !w.backoff(ctx, d, &held) {
			w.set(StateStopped, nil)
			return
		}
		w.countRestart()
	}
}

// life starts the process once and serves until it fails, ctx ends or a
// command ends it; it returns the command (0 on failure) and the failure.
func (w *Worker) life(ctx context.Context) (command, error) {
	w.set(StateStarting, nil)
	out := &tail{}
	proc, be, err := w.start(ctx, out)
	if err != nil {
		return 0, &startFailure{err: err, lines: out.last()}
	}
	defer func() {
		w.update(func() { w.backend, w.pid, w.released = nil, 0, nil })
		_ = be.Close()
		w.stopProcess(proc)
	}()
	w.update(func() { w.backend, w.startedAt, w.released = be, time.Now(), make(chan struct{}) })
	w.log.Info("worker started", "pid", proc.Pid(), "port", w.ep.Port)
	next, err := w.serve(ctx, proc, be)
	if next != 0 {
		w.release() // ended on purpose (drain, stop, restart): a login for this run is moot
	}
	return next, err
}

func (w *Worker) serve(ctx context.Context, proc Process, be worker.Backend) (command, error) {
	failures := 0
	// asked: the check was asked for (Check), so its passing is reported.
	check := func(asked bool) error {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.HealthTimeout)
		defer cancel()
		st, err := be.Status(cctx)
		if err != nil {
			failures++
			w.log.Warn("health check failed", "err", err, "consecutive", failures)
			if failures >= w.cfg.UnhealthyAfter {
				return fmt.Errorf("health check failed %d times: %w", failures, err)
			}
			w.set(StateUnhealthy, err)
			return nil
		}
		failures = 0
		w.updateIf(func() bool { w.checkedAt = time.Now(); return asked })
		if !st.LoggedIn {
			w.set(StateNeedsLogin, chat.ErrNotLoggedIn)
			if w.autoLogin() {
				w.env.loginer.Ensure(w.LoginTarget())
			}
			return nil
		}
		if w.Status().Models == nil {
			w.fetchModels(ctx, be)
		}
		if w.set(StateReady, nil) {
			w.readyHook(ctx)
		}
		return nil
	}
	if err := check(false); err != nil {
		return 0, err
	}
	tick := time.NewTicker(w.cfg.HealthInterval)
	defer tick.Stop()
	for {
		asked := false
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-proc.Exited():
			return 0, fmt.Errorf("worker process %d exited: %v", proc.Pid(), proc.Wait())
		case <-tick.C:
		case <-w.box.wake:
			switch c := w.box.take(); c {
			case 0:
			case cmdCheck:
				asked = true
			case cmdStop:
				return c, nil
			default:
				if next := w.drain(ctx, proc); next != 0 {
					c = next
				}
				return c, nil
			}
		}
		if err := check(asked); err != nil {
			return 0, err
		}
	}
}

// readyHook runs the Ready hook in the background.
func (w *Worker) readyHook(ctx context.Context) {
	if w.env.hooks.Ready == nil {
		return
	}
	t := w.LoginTarget()
	w.env.wg.Go(func() { w.env.hooks.Ready(ctx, t) })
}

// release tells whoever works for this run (a login) that it ends on purpose.
func (w *Worker) release() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released != nil {
		close(w.released)
		w.released = nil
	}
}

// drain takes the worker out of rotation and waits, bounded, for its turns.
// A stop sent meanwhile (the lease is lost) ends the wait at once and is
// returned, as is a later restart or drain, which replaces the one under way.
func (w *Worker) drain(ctx context.Context, proc Process) command {
	w.set(StateDraining, nil)
	busy := w.env.busy
	if busy == nil {
		return 0
	}
	deadline := time.NewTimer(w.env.drainTimeout)
	defer deadline.Stop()
	for {
		n, changed := busy.InFlight(w.cfg.Name)
		if n == 0 {
			return 0
		}
		select {
		case <-changed:
		case <-w.box.wake:
			if c := w.box.take(); c == cmdStop || c == cmdRestart {
				return c
			}
		case <-deadline.C:
			w.log.Warn("drain timed out with turns in flight", "in_flight", n)
			return 0
		case <-ctx.Done():
			return 0
		case <-proc.Exited():
			return 0
		}
	}
}

// start launches the process and waits for it to answer, bounded by
// StartTimeout, failing fast if it exits.
func (w *Worker) start(ctx context.Context, out *tail) (Process, worker.Backend, error) {
	if err := os.MkdirAll(w.cfg.WorkDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	if h := w.env.hooks.PreStart; h != nil {
		// A failed restore is not fatal: the worker starts logged out and
		// the login path takes over.
		if err := h(ctx, w.LoginTarget()); err != nil {
			w.log.Warn("pre-start hook", "err", err)
		}
	}
	stdio := worker.TransportOf(w.driver) == worker.TransportStdio
	ep, err := w.endpoint(stdio)
	if err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	env, err := w.procEnv(ep)
	if err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	spec := ProcSpec{Argv: worker.Argv(w.driver, ep), Env: env, Dir: w.cfg.WorkDir, Log: w.log,
		Lines: out.add}
	var p *pipes
	if stdio {
		if p, err = newPipes(&spec); err != nil {
			return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
		}
	}
	proc, err := w.launcher.Launch(spec)
	if p != nil {
		p.launched()
	}
	if err != nil {
		if p != nil {
			p.close()
		}
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	w.update(func() { w.pid, w.ep = proc.Pid(), ep })
	if p != nil {
		ep.Stdio, ep.Spawn = p.stdio(), w.spawner(env)
		// The pipes are closed once the process is gone, whoever ended it.
		go func() { <-proc.Exited(); p.close() }()
	}
	return w.ready(ctx, proc, ep)
}

// stopProcess is polite first: SIGINT, a bounded wait, then SIGKILL of the
// whole group. Safe to call on an exited process.
func (w *Worker) stopProcess(p Process) {
	select {
	case <-p.Exited():
		_ = p.Signal(syscall.SIGKILL) // reap stray children of the group
		return
	default:
	}
	_ = p.Signal(syscall.SIGINT)
	t := time.NewTimer(w.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-p.Exited():
	case <-t.C:
		w.log.Warn("worker ignored SIGINT, killing", "pid", p.Pid())
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.Exited()
}

// set records the state and reports whether it changed.
func (w *Worker) set(s State, err error) bool {
	changed := false
	w.updateIf(func() bool {
		lastErr := w.lastErr
		if err != nil {
			lastErr = err.Error()
		} else if s == StateReady {
			lastErr = ""
		}
		changed = w.state != s
		if !changed && lastErr == w.lastErr {
			return false
		}
		w.state, w.lastErr = s, lastErr
		return true
	})
	if changed {
		w.log.Info("worker state", "state", string(s))
	}
	return changed
}

// fetchModels caches the worker's model list (once per worker: what an
// account serves does not change between its restarts). A worker whose
// config lists its models is never asked (statusLocked reports those).
func (w *Worker) fetchModels(ctx context.Context, be worker.Backend) {
	if !be.Capabilities().Models {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, w.cfg.HealthTimeout)
	defer cancel()
	ms, err := be.Models(mctx)
	if err != nil {
		w.log.Warn("list models", "err", err)
		return
	}
	w.updateIf(func() bool {
		w.models = ms
		return ms != nil // nothing listed: ask again at the next check
	})
}

// autoLogin reports whether a logged-out worker is logged in by the
// supervisor's login runner.
func (w *Worker) autoLogin() bool { return w.cfg.AutoLogin && w.env.loginer != nil }
