package pool

import (
	"context"
	"errors"

	"github.com/poolgate/poolgate/internal/chat"
)

// LoginTarget is what a login runner needs to log one instance in.
type LoginTarget struct {
	Instance string
	Account  Account
	// WorkDir is the instance's work dir (for screenshots of failures).
	WorkDir string
	// Recipe names the login recipe ("" = the driver's default).
	Recipe string
	// LoginURL asks the running worker for a fresh login URL.
	LoginURL func(ctx context.Context) (string, error)
	// Confirm asks the worker whether it is logged in now: success is what
	// the worker says, not what the page shows.
	Confirm func(ctx context.Context) (bool, error)
	// Released is closed when the supervisor ends, on purpose, the worker
	// run this target was made for: a drain or a stop (the account handed
	// over, its lease lost) or a restart. A login still running for that
	// run is moot and no failure of the account's. Nil when the target is
	// tied to no run (the worker was not running); a crash does not close it.
	Released <-chan struct{}
}

// Loginer runs logins (package login implements it with a headless browser).
type Loginer interface {
	// Ensure starts a login for t.Instance unless one is running or the
	// instance gave up after its attempts; it does not block.
	Ensure(t LoginTarget)
}

// SetLoginer installs the login runner; call before Start. Without one, a
// logged-out instance stays needs_login until it is logged in by hand.
func (p *Pool) SetLoginer(l Loginer) { p.loginer = l }

// loginTarget describes w for the login runner; the functions use whatever
// backend is current when they run.
func (w *Worker) loginTarget() LoginTarget { return w.target() }

func (w *Worker) target() LoginTarget {
	current := func() (Backend, error) {
		w.pool.mu.Lock()
		be := w.backend
		w.pool.mu.Unlock()
		if be == nil {
			return nil, chat.ErrWorkerGone
		}
		return be, nil
	}
	w.pool.mu.Lock()
	released := w.released
	w.pool.mu.Unlock()
	return LoginTarget{
		Instance: w.cfg.Name, Account: w.cfg.Account, WorkDir: w.cfg.WorkDir, Recipe: w.cfg.Recipe, Released: released,
		LoginURL: func(ctx context.Context) (string, error) {
			be, err := current()
			if err != nil {
				return "", err
			}
			lu, ok := be.(LoginURLer)
			if !ok {
				return "", errors.New("this worker has no browser login")
			}
			return lu.LoginURL(ctx)
		},
		Confirm: func(ctx context.Context) (bool, error) {
			be, err := current()
			if err != nil {
				return false, err
			}
			st, err := be.Status(ctx)
			if err == nil && st.LoggedIn {
				w.send(cmdCheck) // back to ready at once, not at the next tick
			}
			return st.LoggedIn, err
		},
	}
}

// LoginTarget returns the named instance's login target (for the admin API's
// on-demand login).
func (p *Pool) LoginTarget(name string) (LoginTarget, error) {
	w, ok := p.byName[name]
	if !ok {
		return LoginTarget{}, ErrUnknownInstance
	}
	return w.loginTarget(), nil
}

// LoginPort returns the port where the named instance takes its login
// callback (0 when it is not running), for the admin API's manual fallback.
func (p *Pool) LoginPort(name string) (int, error) {
	w, ok := p.byName[name]
	if !ok {
		return 0, ErrUnknownInstance
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if w.pid == 0 {
		return 0, nil
	}
	return w.ep.AuxPort, nil
}
