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
// pipes, turns, sessions and health), and the login around it.
//
// A worker runs one of two commands. With a login to try (a personal
// access token, or a stored login not yet refused) it runs the stream-json
// session, agentcli's. Without one it runs `qodercli login`, the CLI's
// device login, whose URL is the instance's login URL: a session without a
// login answers "Not logged in" and exits seconds later by itself, which
// would have the supervisor restart it again and again. When the browser
// has approved the login, `qodercli login` stores it and exits; the
// supervisor starts the worker again, and it runs the session.
type Driver struct {
	*agentcli.Driver
	set Settings
	cli []string // the argv prefix that runs qodercli
	log *slog.Logger

	mu sync.Mutex
	// login: the instances whose current start runs `qodercli login`.
	login map[string]bool
	// refused: the stored login each instance's CLI refused (a session
	// is not tried again on it).
	refused map[string]string
}

var (
	_ worker.Driver      = (*Driver)(nil)
	_ worker.Transporter = (*Driver)(nil)
	_ worker.Preparer    = (*Driver)(nil)
	_ worker.TurnChecker = (*Driver)(nil)
)

// New returns a driver for the kind's settings s over cli, agentcli's
// configuration (the command that runs qodercli, or the simulator playing
// it, and the timeouts), whose profile and session settings New fills in
// from s.
func New(s Settings, cli agentcli.Config) *Driver {
	cli.Profile, cli.SystemPrompt, cli.LiveSessions = Profile(s), s.SystemPrompt, s.LiveSessions
	cli.TurnTimeout, cli.IdleTimeout, cli.Record, cli.RecordDir = s.TurnTimeout, s.IdleTimeout, s.Record, s.RecordDir
	if cli.Logger == nil {
		cli.Logger = slog.Default()
	}
	return &Driver{Driver: agentcli.New(cli), set: s, cli: cli.Command, log: cli.Logger, login: map[string]bool{},
		refused: map[string]string{}}
}

// configDir is the CLI's config dir in ep's work dir (agentcli's).
func configDir(ep worker.Endpoint) string {
	d, err := filepath.Abs(filepath.Join(ep.WorkDir, "config"))
	if err != nil {
		return filepath.Join(ep.WorkDir, "config")
	}
	return d
}

// storedLogin is what is known of the stored login of ep's CLI without
// reading it ("": there is none).
func storedLogin(ep worker.Endpoint) string {
	return agentcli.CredentialPrint(configDir(ep), []string{filepath.Join(".auth", credFile)})
}

// Command is the argv of the worker's next start: the stream-json
// session with the account's args when there is a login to try, else
// `qodercli login`, which refuses the session's options.
func (d *Driver) Command(ep worker.Endpoint) []string {
	st := storedLogin(ep)
	d.mu.Lock()
	refused, wasRefused := d.refused[ep.Name]
	login := !d.set.isToken(ep.Account.Password) && (st == "" || wasRefused && refused == st)
	d.login[ep.Name] = login
	d.mu.Unlock()
	if login {
		return d.command("login")
	}
	return append(d.Driver.Command(ep), ep.Account.Args...)
}

// PlacesArgs marks the account's args as Command's to place (they follow
// the session's command, never the login's).
func (d *Driver) PlacesArgs() {}

// command is the argv of one of the CLI's commands.
func (d *Driver) command(args ...string) []string {
	return append(append([]string(nil), d.cli...), args...)
}

// refuse notes that the CLI refused the stored login as it is now, so that
// the next start runs the device login.
func (d *Driver) refuse(ep worker.Endpoint) {
	st := storedLogin(ep)
	d.mu.Lock()
	d.refused[ep.Name] = st
	d.mu.Unlock()
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

// StartReason is the CLI's own reason: the supervisor adds no line of the
// worker's output to it (the CLI prints the error again on its standard
// error, with its stack, which may reach the log a moment later or not).
func (e *StartError) StartReason() string { return e.Reason }

// errLoggedOutAtStart ends the wait for the initialize answer: the CLI
// said instead that it is not logged in, and will answer nothing.
var errLoggedOutAtStart = errors.New("qodercli is not logged in")

// authPoll is how often a start that waits for the CLI looks at its run
// log for a failed login.
const authPoll = 250 * time.Millisecond

// Connect takes the started CLI's pipes. For `qodercli login` it waits
// for the device URL. For a session it waits for its first answer: the
// initialize answer of a logged-in CLI (agentcli's backend then runs its
// turns), the unasked "Not logged in" turn of one that is not (the stored
// login is noted as refused and the process ended, so the next start
// runs the device login), or, for a personal access token the CLI could
// not use, the failure its run log records (a *StartError).
func (d *Driver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	if ep.Stdio == nil || ep.Spawn == nil {
		return nil, fmt.Errorf("qoder %s: the worker was started without its pipes", ep.Name)
	}
	d.mu.Lock()
	login := d.login[ep.Name]
	d.mu.Unlock()
	if login {
		return d.connectLogin(ctx, ep)
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
	wg.Go(func() { watchStart(cctx, cancel, t, ep.Name, configDir(ep), since) })
	be, err := d.Driver.Connect(cctx, inner)
	cancel(nil)
	wg.Wait()
	if err == nil {
		in.unhold()
		return newBackend(d, ep, be, in), nil
	}
	if t.isLoggedOut() {
		d.log.Info("qodercli refused its stored login: the account waits for a device login", "instance", ep.Name)
		d.refuse(ep)
		in.release() // the process is of no more use; the next start logs in
		return newBackend(d, ep, nil, in), nil
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
