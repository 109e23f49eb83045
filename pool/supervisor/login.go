package supervisor

import (
	"context"
	"errors"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// LoginTarget is what a login runner needs to log one instance in.
type LoginTarget struct {
	Instance string
	Account  worker.Account
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

// Loginer runs logins: the supervisor's login port, owned here, which
// package login adapts to from the floor above (login.Runner, with a
// headless browser); supervisortest has a fake.
type Loginer interface {
	// Ensure starts a login for t.Instance unless one is running or the
	// instance gave up after its attempts; it does not block.
	Ensure(t LoginTarget)
}

// LoginTarget describes the worker for a login runner; its functions use
// whatever backend is current when they run.
func (w *Worker) LoginTarget() LoginTarget {
	current := func() (worker.Backend, error) {
		be := w.Status().Backend
		if be == nil {
			return nil, chat.ErrWorkerGone
		}
		return be, nil
	}
	w.mu.Lock()
	released := w.released
	w.mu.Unlock()
	return LoginTarget{
		Instance: w.cfg.Name, Account: w.cfg.Account, WorkDir: w.cfg.WorkDir, Recipe: w.cfg.Recipe, Released: released,
		LoginURL: func(ctx context.Context) (string, error) {
			be, err := current()
			if err != nil {
				return "", err
			}
			if !be.Capabilities().BrowserLogin {
				return "", errors.New("this worker has no browser login")
			}
			return be.LoginURL(ctx)
		},
		Confirm: func(ctx context.Context) (bool, error) {
			be, err := current()
			if err != nil {
				return false, err
			}
			st, err := be.Status(ctx)
			if err == nil && st.LoggedIn {
				w.Check() // back to ready at once, not at the next tick
			}
			return st.LoggedIn, err
		},
	}
}
