package qoder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Backend is one account's qodercli: agentcli's backend while the CLI is
// logged in, and the login state this package keeps around it.
//
// A CLI that is not logged in keeps running with its input open (it exits
// when its input ends, and a worker that exits is restarted: a restart
// loop for an account that only needs a login). Its health check is
// cheap: the process is there, and its stored login has not changed.
// When the stored login changes (a device login landed, a bundle was
// installed) the CLI's status command is asked in the background; once it
// says logged in, the process's input is closed, it exits and the
// supervisor starts a new one, which serves. The process of a logged-out
// CLI never picks a new login up by itself.
type Backend struct {
	d         *Driver
	ep        worker.Endpoint
	configDir string
	inner     worker.Backend // agentcli's; nil when the CLI was logged out at its start
	in        *heldInput     // the supervised process's input
	tap       *tap
	wg        sync.WaitGroup // the background status command

	mu        sync.Mutex
	loggedOut bool
	stamp     credStamp // the stored login when the account was found logged out
	checking  bool      // a status command runs
	restart   bool      // the status command said logged in: the process is ending
	checkErr  error     // the last status command's failure
	login     worker.Child
	closed    bool
}

var _ worker.Backend = (*Backend)(nil)

func newBackend(d *Driver, ep worker.Endpoint, configDir string, inner worker.Backend, in *heldInput, t *tap) *Backend {
	b := &Backend{d: d, ep: ep, configDir: configDir, inner: inner, in: in, tap: t, loggedOut: inner == nil}
	if b.loggedOut {
		b.stamp = stampOf(b.credPath())
	}
	return b
}

func (b *Backend) credPath() string { return filepath.Join(b.configDir, ".auth", credFile) }

// credStamp is what is known of the stored login file without reading it.
type credStamp struct {
	exists bool
	size   int64
	mod    time.Time
}

func stampOf(path string) credStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return credStamp{}
	}
	return credStamp{exists: true, size: fi.Size(), mod: fi.ModTime()}
}

// Status is the health check. Logged in, it is agentcli's (the process
// answers a control request). Logged out, it says so, and looks for a
// new stored login (see Backend).
func (b *Backend) Status(ctx context.Context) (worker.AuthState, error) {
	b.mu.Lock()
	out := b.loggedOut
	b.mu.Unlock()
	if !out {
		return b.inner.Status(ctx)
	}
	if !b.tap.alive() {
		return worker.AuthState{}, fmt.Errorf("qoder %s: %w", b.ep.Name, chat.ErrWorkerGone)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.restart {
		return worker.AuthState{}, fmt.Errorf("qoder %s: logged in since the process started; it is being restarted to serve", b.ep.Name)
	}
	if st := stampOf(b.credPath()); st != b.stamp && st.exists && !b.checking && !b.closed {
		b.checking = true
		b.wg.Go(func() { b.check(st) })
	}
	if err := b.checkErr; err != nil {
		b.d.log.Warn("qodercli status", "instance", b.ep.Name, "err", err)
		b.checkErr = nil
	}
	return worker.AuthState{}, nil
}

// check asks the CLI's status command whether the stored login, as of
// st, is a login; if so it ends the logged-out process.
func (b *Backend) check(st credStamp) {
	ctx, cancel := context.WithTimeout(context.Background(), b.d.cfg.StartTimeout)
	defer cancel()
	auth, err := b.status(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checking = false
	switch {
	case err != nil:
		b.checkErr = err // asked again at the next change
		b.stamp = st
	case auth.LoggedIn && !b.closed:
		b.restart = true
		b.d.log.Info("qodercli is logged in now: restarting its process, which read its login at its start",
			"instance", b.ep.Name, "account", auth.Account)
		b.in.release()
	default:
		b.stamp = st
	}
}

// status runs `qodercli status -o json` and reads its answer as soon as
// it is printed: logged out, the command lingers for seconds after it.
func (b *Backend) status(ctx context.Context) (worker.AuthState, error) {
	ch, err := b.ep.Spawn(b.d.command("status", "-o", "json"), nil)
	if err != nil {
		return worker.AuthState{}, err
	}
	defer ch.Stop()
	_ = ch.Stdio().In.Close()
	type res struct {
		st  worker.AuthState
		err error
	}
	done := make(chan res, 1)
	go func() {
		st, err := readStatus(ch.Stdio().Out)
		done <- res{st, err}
	}()
	select {
	case r := <-done:
		return r.st, r.err
	case <-ctx.Done():
		ch.Stop()
		<-done
		return worker.AuthState{}, fmt.Errorf("qodercli status: %w", ctx.Err())
	}
}

// command is the argv of one of the CLI's commands.
func (d *Driver) command(args ...string) []string {
	return append(append([]string(nil), d.cfg.Command...), args...)
}

// Start runs a turn on agentcli's backend; a logged-out account takes
// none. A turn the CLI refused for want of a login puts the account in
// the logged-out state.
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
// logged out.
func (b *Backend) noteError(err error) {
	if !errors.Is(err, chat.ErrNotLoggedIn) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.loggedOut {
		b.loggedOut, b.stamp = true, stampOf(b.credPath())
		b.d.log.Warn("qodercli refused a turn for want of a login: the account waits for a login", "instance", b.ep.Name)
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

// Close stops the login command, agentcli's processes and the status
// command, and ends the supervised process's input.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	login := b.login
	b.login = nil
	b.mu.Unlock()
	if login != nil {
		login.Stop()
	}
	var err error
	if b.inner != nil {
		err = b.inner.Close()
	}
	b.in.release()
	b.wg.Wait()
	return err
}
