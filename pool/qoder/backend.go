package qoder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Backend is one account's running qodercli, in one of three forms:
//
//   - a logged-in session: agentcli's backend runs its turns and health;
//   - a session whose login was refused (at its start, or by a turn): it
//     takes no turn, and its process ends so that the next start runs the
//     device login;
//   - the device login, `qodercli login`: it takes no turn, its URL is the
//     login URL, and it exits once the login is stored, for the next start
//     to run the session.
//
// A refused or logging-in account is logged out to the supervisor, which
// holds it in needs_login (and, with automatic login, hands the URL to the
// browser).
type Backend struct {
	d     *Driver
	ep    worker.Endpoint
	inner worker.Backend // agentcli's; nil when the CLI is not logged in
	in    *heldInput     // the supervised session's input (nil for the login)
	url   string         // the device login's URL (login form only)

	mu        sync.Mutex
	loggedOut bool
}

var _ worker.Backend = (*Backend)(nil)

func newBackend(d *Driver, ep worker.Endpoint, inner worker.Backend, in *heldInput) *Backend {
	return &Backend{d: d, ep: ep, inner: inner, in: in, loggedOut: inner == nil}
}

// Status is the health check. Logged in, it is agentcli's (the process
// answers a control request); running the device login, the account is
// logged out. A session whose login was refused fails it: its process is
// ending, and the next start's device login has the URL a login needs
// (saying "logged out" here would send the browser after a URL this
// process does not have).
func (b *Backend) Status(ctx context.Context) (worker.AuthState, error) {
	b.mu.Lock()
	out := b.loggedOut
	b.mu.Unlock()
	switch {
	case !out:
		return b.inner.Status(ctx)
	case b.url == "":
		return worker.AuthState{}, fmt.Errorf("qoder %s: %w: its stored login was refused, and the worker restarts into its device login",
			b.ep.Name, chat.ErrNotLoggedIn)
	}
	return worker.AuthState{}, nil
}

// Start runs a turn on agentcli's backend; a logged-out account takes
// none. A turn the CLI refused for want of a login makes the account
// logged out.
func (b *Backend) Start(ctx context.Context, t *chat.Turn) (chat.Answer, error) {
	b.mu.Lock()
	out := b.loggedOut
	b.mu.Unlock()
	if out {
		return nil, fmt.Errorf("qoder %s: %w (%w)", b.ep.Name, chat.ErrNotLoggedIn, chat.ErrNotSent)
	}
	a, err := b.inner.Start(ctx, t)
	if err != nil {
		b.noteError(err)
		return nil, err
	}
	return &answer{Answer: a, b: b}, nil
}

// noteError notes a turn's failure: a refused login makes the account
// logged out, and ends the session's process (see Driver).
func (b *Backend) noteError(err error) {
	if !errors.Is(err, chat.ErrNotLoggedIn) {
		return
	}
	b.mu.Lock()
	first := !b.loggedOut
	b.loggedOut = true
	b.mu.Unlock()
	if first {
		b.d.log.Warn("qodercli refused a turn for want of a login: the account waits for a device login", "instance", b.ep.Name)
		b.d.refuse(b.ep)
		b.in.release()
	}
}

// answer is a turn's answer, watched for a refused login.
type answer struct {
	chat.Answer
	b *Backend
}

func (a *answer) Next() (chat.Event, bool) {
	ev, ok := a.Answer.Next()
	if ok && ev.Type == chat.EventError {
		a.b.noteError(ev.Err)
	}
	return ev, ok
}

// Capabilities: models and sessions as agentcli's backend has them, and
// the device login.
func (b *Backend) Capabilities() worker.Capabilities {
	c := worker.Capabilities{BrowserLogin: true, Sessions: true}
	if b.inner != nil {
		ic := b.inner.Capabilities()
		c.Models, c.RawModels = ic.Models, ic.RawModels
	}
	return c
}

// Models lists the models the CLI offered at its start.
func (b *Backend) Models(ctx context.Context) ([]chat.Model, error) {
	if b.inner == nil {
		return nil, worker.ErrUnsupported
	}
	return b.inner.Models(ctx)
}

// RawModels is the CLI's own model payload beside the parsed list.
func (b *Backend) RawModels(ctx context.Context) (json.RawMessage, []chat.Model, error) {
	if b.inner == nil {
		return nil, nil, worker.ErrUnsupported
	}
	return b.inner.RawModels(ctx)
}

// DeleteSession frees a session nobody continues.
func (b *Backend) DeleteSession(ctx context.Context, id string) error {
	if b.inner == nil {
		return nil
	}
	return b.inner.DeleteSession(ctx, id)
}

// Close stops agentcli's processes and ends the supervised session's
// input.
func (b *Backend) Close() error {
	var err error
	if b.inner != nil {
		err = b.inner.Close()
	}
	if b.in != nil {
		b.in.release()
	}
	return err
}
