package qoder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// Driver is the qoder kind's driver: agentcli's for a logged-in CLI (its
// pipes, turns, sessions and health), and the login state around it.
type Driver struct {
	*agentcli.Driver
	cfg Config
	log *slog.Logger
}

var (
	_ worker.Driver      = (*Driver)(nil)
	_ worker.Transporter = (*Driver)(nil)
	_ worker.Preparer    = (*Driver)(nil)
	_ worker.TurnChecker = (*Driver)(nil)
)

// New returns a driver for cfg.
func New(cfg Config) *Driver {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	return &Driver{Driver: agentcli.New(cfg.cliConfig()), cfg: cfg, log: cfg.Logger}
}

// StartError is a start qodercli refused before it read any input: its
// login with the account's personal access token failed, for the reason
// it gave. The supervisor counts it like any failed start (failed after
// FailAfter in a row), and shows the reason.
type StartError struct {
	Instance, Reason string
}

func (e *StartError) Error() string {
	return fmt.Sprintf("qoder %s: qodercli could not log in with the account's personal access token: %s", e.Instance, e.Reason)
}

// errLoggedOutAtStart ends the wait for the initialize answer: the CLI
// said instead that it is not logged in, and will answer nothing.
var errLoggedOutAtStart = errors.New("qodercli is not logged in")

// authPoll is how often a start that waits for the CLI looks at its run
// log for a failed login.
const authPoll = 250 * time.Millisecond

// Connect takes the started CLI's pipes and waits for its first answer:
// the initialize answer of a logged-in CLI (agentcli's backend then runs
// its turns), the unasked "Not logged in" turn of one that is not (the
// backend holds the account in needs_login, process kept), or, for a
// personal access token the CLI could not use, the failure its run log
// records (a *StartError).
func (d *Driver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	if ep.Stdio == nil || ep.Spawn == nil {
		return nil, fmt.Errorf("qoder %s: the worker was started without its pipes", ep.Name)
	}
	configDir, err := filepath.Abs(filepath.Join(ep.WorkDir, "config"))
	if err != nil {
		return nil, err
	}
	// Runs the CLI logged before this start are not this start's; the
	// second of slack is for the clocks' granularity.
	since := time.Now().Add(-time.Second)
	t := newTap(ep.Stdio.Out, Vocabulary())
	in := &heldInput{w: ep.Stdio.In, held: true}
	inner := ep
	inner.Stdio = &worker.Stdio{In: in, Out: t}

	cctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { watchStart(cctx, cancel, t, ep.Name, configDir, since) })
	be, err := d.Driver.Connect(cctx, inner)
	cancel(nil)
	wg.Wait()
	if err == nil {
		in.unhold()
		return newBackend(d, ep, configDir, be.(*agentcli.Backend), in, t), nil
	}
	if t.isLoggedOut() {
		d.log.Info("qodercli is not logged in: the account waits for a login", "instance", ep.Name)
		return newBackend(d, ep, configDir, nil, in, t), nil
	}
	var se *StartError
	if errors.As(context.Cause(cctx), &se) {
		// The input stays open: a process that exits at once would have
		// the supervisor report its exit instead of this reason. The
		// supervisor stops it.
		return nil, se
	}
	in.release()
	return nil, err
}

// watchStart ends the wait for the initialize answer early: at the
// CLI's not-logged-in answer, or at a failed login in its run log.
func watchStart(ctx context.Context, cancel context.CancelCauseFunc, t *tap, instance, configDir string, since time.Time) {
	tick := time.NewTicker(authPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.loggedOut:
			cancel(errLoggedOutAtStart)
			return
		case <-tick.C:
			if why := authFailure(configDir, since); why != "" {
				cancel(&StartError{Instance: instance, Reason: why})
				return
			}
		}
	}
}
