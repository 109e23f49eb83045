package pool

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
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
)

// States lists every state, for metrics that pre-initialise their labels.
var States = []State{StateStarting, StateReady, StateUnhealthy, StateNeedsLogin, StateBackoff, StateDraining, StateStopped}

// Account is one upstream account a worker runs as.
type Account struct {
	Name     string
	Username string
	// Password is never logged nor shown.
	Password string
	// Env is extra environment for this account's worker (KEY=VALUE).
	Env []string
	// Args are extra worker arguments for this account only.
	Args []string
}

// WorkerConfig configures one worker. Zero fields take the defaults noted.
type WorkerConfig struct {
	// Name is the instance name (default: the account name).
	Name    string
	Account Account
	// WorkDir is the worker's own directory (required).
	WorkDir string
	// MaxInFlight is the per-instance cap on concurrent turns (default 1:
	// one turn at a time per Lingma instance).
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
	// StopGrace is the wait between SIGINT and SIGKILL (default 3s).
	StopGrace time.Duration
	// AutoLogin hands a logged-out worker to the pool's Loginer (default
	// off here; main turns it on from POOLGATE_AUTO_LOGIN).
	AutoLogin bool
	// Recipe names the account's login recipe ("" = the default).
	Recipe string
	// Held keeps the worker stopped until Pool.Restart starts it (a replica
	// runs only the accounts it holds a lease for).
	Held bool
}

func (c *WorkerConfig) fill() {
	if c.Name == "" {
		c.Name = c.Account.Name
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1
	}
	if c.UnhealthyAfter <= 0 {
		c.UnhealthyAfter = 3
	}
	def(&c.StartTimeout, 20*time.Second)
	def(&c.HealthInterval, 5*time.Second)
	def(&c.HealthTimeout, 3*time.Second)
	def(&c.BackoffMin, 500*time.Millisecond)
	def(&c.BackoffMax, 30*time.Second)
	def(&c.StableAfter, 60*time.Second)
	def(&c.StopGrace, 3*time.Second)
}

type command int

const (
	cmdRestart command = iota + 1
	cmdDrain
	cmdStop  // stop now: in-flight turns are cut (a lost lease)
	cmdCheck // re-check health and login now
)

// Worker supervises one account's worker process. Its run loop alone changes
// its state; everything else asks through methods (STYLE 5).
type Worker struct {
	cfg      WorkerConfig
	driver   Driver
	launcher Launcher
	pool     *Pool
	log      *slog.Logger
	box      mailbox

	// Guarded by pool.mu: what the picker and the admin API read.
	state     State
	pid       int
	restarts  int
	lastErr   string
	inFlight  int
	backend   Backend
	coolUntil time.Time // zero: not cooling down
	coolCount int       // consecutive cooldowns, for exponential backoff
	startedAt time.Time
	ep        Endpoint
	models    []chat.Model
	fence     time.Time     // zero: unfenced; else usable only before it (lease)
	released  chan struct{} // closed when this run is ended on purpose (LoginTarget.Released)
}

// Name returns the instance name.
func (w *Worker) Name() string { return w.cfg.Name }

// Account returns the account name.
func (w *Worker) Account() string { return w.cfg.Account.Name }

// Username returns the instance's login name ("" when it has none).
func (w *Worker) Username() string { return w.cfg.Account.Username }

// WorkDir returns the worker's directory.
func (w *Worker) WorkDir() string { return w.cfg.WorkDir }

func (w *Worker) send(c command) { w.box.post(c) }

// mailbox holds the commands sent to a worker's run loop until it takes
// them. A command is never lost: of restart, drain and stop the latest one
// sent is the one that counts (each replaces what was asked before it), and a
// check is kept until the loop has looked at the worker again.
type mailbox struct {
	mu    sync.Mutex
	cmd   command // the latest restart, drain or stop; 0 if none
	check bool
	wake  chan struct{} // one slot: "something is waiting"
}

func newMailbox() mailbox { return mailbox{wake: make(chan struct{}, 1)} }

func (m *mailbox) post(c command) {
	m.mu.Lock()
	if c == cmdCheck {
		m.check = true
	} else {
		m.cmd = c
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default: // already signalled; take() will see this command too
	}
}

// take returns the waiting command (a lifecycle command before a check, which
// it includes), or 0 when there is none.
func (m *mailbox) take() command {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cmd
	if c == 0 && m.check {
		c = cmdCheck
	}
	m.cmd, m.check = 0, false
	return c
}

// run is the worker's whole life; it returns when ctx ends, with the process
// stopped.
func (w *Worker) run(ctx context.Context) {
	backoff := w.cfg.BackoffMin
	held := w.cfg.Held
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
			held = true
			continue
		case cmdRestart:
			backoff = w.cfg.BackoffMin
			w.countRestart()
			continue
		}
		if time.Since(started) >= w.cfg.StableAfter {
			backoff = w.cfg.BackoffMin
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

// backoff waits d before the next start; a restart cuts it short, a drain or
// stop ends it holding the worker. It reports false when ctx ended.
func (w *Worker) backoff(ctx context.Context, d time.Duration, held *bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		case <-w.box.wake:
			switch w.box.take() {
			case cmdDrain, cmdStop:
				*held = true
				return true
			case cmdRestart:
				return true
			}
		}
	}
}

func (w *Worker) countRestart() {
	w.pool.mu.Lock()
	w.restarts++
	w.pool.mu.Unlock()
	if m := w.pool.metrics; m != nil {
		m.Restarts.WithLabelValues(w.cfg.Name).Inc()
	}
}

// life starts the process once and serves until it fails, ctx ends or a
// command ends it; it returns the command (0 on failure) and the failure.
func (w *Worker) life(ctx context.Context) (command, error) {
	w.set(StateStarting, nil)
	proc, be, err := w.start(ctx)
	if err != nil {
		return 0, err
	}
	defer func() {
		w.pool.mu.Lock()
		w.backend, w.pid, w.released = nil, 0, nil
		w.pool.mu.Unlock()
		w.pool.broadcast()
		_ = be.Close()
		w.stopProcess(proc)
	}()
	w.pool.mu.Lock()
	w.backend, w.startedAt, w.released = be, time.Now(), make(chan struct{})
	w.pool.mu.Unlock()
	w.log.Info("worker started", "pid", proc.Pid(), "port", w.ep.Port)
	next, err := w.serve(ctx, proc, be)
	if next != 0 {
		w.release() // ended on purpose (drain, stop, restart): a login for this run is moot
	}
	return next, err
}

func (w *Worker) serve(ctx context.Context, proc Process, be Backend) (command, error) {
	failures := 0
	check := func() error {
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
		w.endCooldown()
		if !st.LoggedIn {
			w.set(StateNeedsLogin, chat.ErrNotLoggedIn)
			if w.autoLogin() {
				w.pool.loginer.Ensure(w.loginTarget())
			}
			return nil
		}
		if w.models == nil {
			w.fetchModels(ctx, be)
		}
		if w.set(StateReady, nil) {
			w.pool.readyHook(ctx, w)
		}
		return nil
	}
	if err := check(); err != nil {
		return 0, err
	}
	tick := time.NewTicker(w.cfg.HealthInterval)
	defer tick.Stop()
	cool := time.NewTimer(time.Hour)
	defer cool.Stop()
	for {
		var coolC <-chan time.Time
		if d, cooling := w.cooldownLeft(); cooling {
			cool.Reset(d)
			coolC = cool.C
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-proc.Exited():
			return 0, fmt.Errorf("worker process %d exited: %v", proc.Pid(), proc.Wait())
		case <-tick.C:
		case <-coolC: // the cooldown ended: probe before returning to rotation
		case <-w.box.wake:
			switch c := w.box.take(); c {
			case 0, cmdCheck:
			case cmdStop:
				return c, nil
			default:
				if next := w.drain(ctx, proc); next != 0 {
					c = next
				}
				return c, nil
			}
		}
		if err := check(); err != nil {
			return 0, err
		}
	}
}

// release tells whoever works for this run (a login) that it ends on purpose.
func (w *Worker) release() {
	w.pool.mu.Lock()
	defer w.pool.mu.Unlock()
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
	deadline := time.NewTimer(w.pool.cfg.DrainTimeout)
	defer deadline.Stop()
	for {
		w.pool.mu.Lock()
		n, ch := w.inFlight, w.pool.changed
		w.pool.mu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-ch:
		case <-w.box.wake:
			if c := w.box.take(); c == cmdStop {
				return c
			} else if c == cmdRestart {
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
func (w *Worker) start(ctx context.Context) (Process, Backend, error) {
	if err := os.MkdirAll(w.cfg.WorkDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	if h := w.pool.hooks.PreStart; h != nil {
		// A failed restore is not fatal: the worker starts logged out and
		// the login path takes over.
		if err := h(ctx, w.target()); err != nil {
			w.log.Warn("pre-start hook", "err", err)
		}
	}
	ep, err := w.endpoint()
	if err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	w.ep = ep
	proc, err := w.launcher.Launch(ProcSpec{
		Argv: append(w.driver.Command(ep), w.cfg.Account.Args...), Env: w.cfg.Account.Env, Dir: w.cfg.WorkDir, Log: w.log,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("start worker %s: %w", w.cfg.Name, err)
	}
	w.setPID(proc.Pid())
	sctx, cancel := context.WithTimeout(ctx, w.cfg.StartTimeout)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(sctx, 2*time.Second)
		be, err := w.driver.Connect(actx, ep)
		acancel()
		if err == nil {
			return proc, be, nil
		}
		select {
		case <-proc.Exited():
			w.setPID(0)
			return nil, nil, fmt.Errorf("worker %s exited before ready: %v", w.cfg.Name, proc.Wait())
		case <-sctx.Done():
			w.stopProcess(proc)
			w.setPID(0)
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("worker %s not ready within %s: %w", w.cfg.Name, w.cfg.StartTimeout, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *Worker) setPID(pid int) {
	w.pool.mu.Lock()
	w.pid = pid
	w.pool.mu.Unlock()
}

// endpoint picks free loopback ports for this start.
func (w *Worker) endpoint() (Endpoint, error) {
	p1, err := freePort()
	if err != nil {
		return Endpoint{}, err
	}
	p2, err := freePort()
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Name: w.cfg.Name, WorkDir: w.cfg.WorkDir, Port: p1, AuxPort: p2, Account: w.cfg.Account}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
	w.pool.mu.Lock()
	changed := w.state != s
	w.state = s
	if err != nil {
		w.lastErr = err.Error()
	} else if s == StateReady {
		w.lastErr = ""
	}
	w.pool.mu.Unlock()
	if changed {
		w.log.Info("worker state", "state", string(s))
		w.pool.broadcast()
	}
	return changed
}

// cooldown takes the worker out of rotation for d (0: exponential from 5s).
func (w *Worker) cooldown(d time.Duration) time.Duration {
	w.pool.mu.Lock()
	if d <= 0 {
		d = min(5*time.Second<<min(w.coolCount, 6), 5*time.Minute)
	}
	w.coolCount++
	w.coolUntil = time.Now().Add(d)
	w.pool.mu.Unlock()
	w.send(cmdCheck) // re-arm the loop's cooldown timer
	return d
}

func (w *Worker) cooldownLeft() (time.Duration, bool) {
	w.pool.mu.Lock()
	defer w.pool.mu.Unlock()
	if w.coolUntil.IsZero() {
		return 0, false
	}
	return max(time.Until(w.coolUntil), 0), true
}

// endCooldown clears a cooldown whose time is up (after a good probe).
func (w *Worker) endCooldown() {
	w.pool.mu.Lock()
	ended := !w.coolUntil.IsZero() && !time.Now().Before(w.coolUntil)
	if ended {
		w.coolUntil = time.Time{}
	}
	w.pool.mu.Unlock()
	if ended {
		w.log.Info("cooldown over, back in rotation")
		w.pool.broadcast()
	}
}

// usable reports whether the picker may give this worker a turn; pool.mu held.
func (w *Worker) usable() bool {
	return w.state == StateReady && w.backend != nil && w.coolUntil.IsZero() &&
		(w.fence.IsZero() || time.Now().Before(w.fence))
}

// turnOK notes a successful turn: the cooldown backoff starts over.
func (w *Worker) turnOK() {
	w.pool.mu.Lock()
	w.coolCount = 0
	w.pool.mu.Unlock()
}

// fetchModels caches the worker's model list (once per worker: every
// account of a pool serves the same models).
func (w *Worker) fetchModels(ctx context.Context, be Backend) {
	ml, ok := be.(ModelLister)
	if !ok {
		return
	}
	mctx, cancel := context.WithTimeout(ctx, w.cfg.HealthTimeout)
	defer cancel()
	ms, err := ml.Models(mctx)
	if err != nil {
		w.log.Warn("list models", "err", err)
		return
	}
	w.pool.setModels(w, ms)
}

// autoLogin reports whether a logged-out worker is logged in by the pool.
func (w *Worker) autoLogin() bool { return w.cfg.AutoLogin && w.pool.loginer != nil }
