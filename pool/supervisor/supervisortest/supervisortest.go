// Package supervisortest has in-memory fakes of the supervisor's seams for
// the tests of the supervisor and of the packages above it (admission, the
// router, the cluster): a Launcher whose processes are plain values and a
// Driver whose backends answer as the test says, so the real supervisor runs
// its whole life cycle without a process (inside a synctest bubble too).
package supervisortest

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// Configs returns a worker config per name for the fakes, at test speed
// (a health check every 300 ms, a second's stop grace), with automatic
// login; held keeps the workers stopped until something starts them (a
// lease).
func Configs(t testing.TB, held bool, names ...string) []supervisor.WorkerConfig {
	dir := t.TempDir()
	var wcs []supervisor.WorkerConfig
	for _, n := range names {
		wcs = append(wcs, supervisor.WorkerConfig{Name: n, Account: worker.Account{Name: n}, WorkDir: dir + "/" + n,
			Held: held, AutoLogin: true, HealthInterval: 300 * time.Millisecond, StopGrace: time.Second})
	}
	return wcs
}

// Drive has d start every worker of wcs that names no driver of its own
// (WorkerConfig.Driver) and returns them, for a supervisor over fakes:
// New(cfg, Drive(f, wcs), f, ...).
func Drive(d worker.Driver, wcs []supervisor.WorkerConfig) []supervisor.WorkerConfig {
	for i := range wcs {
		if wcs[i].Driver == nil {
			wcs[i].Driver = d
		}
	}
	return wcs
}

// Workers is a fake Launcher and Driver: one fake process per start, one
// backend per connect, keyed by instance name.
type Workers struct {
	// Start answers a turn on the named instance; nil answers every turn
	// with the text "ok".
	Start func(ctx context.Context, instance string, t *chat.Turn) (chat.Answer, error)
	// Models is what every backend lists (nil: the backends list none).
	Models []chat.Model
	// Continues says whether a turn on the named instance may continue an
	// upstream session (the reuse policy a driver may have); nil: always.
	Continues func(instance string, t *chat.Turn) bool
	// Health answers the named instance's health checks; nil: logged in
	// unless SetLoggedIn said otherwise. One that waits for ctx plays a
	// worker too starved to answer, whose loop takes no command meanwhile.
	Health func(ctx context.Context, instance string) (worker.AuthState, error)

	mu         sync.Mutex
	loggedOut  map[string]bool // by instance; missing: logged in
	failLaunch map[string]bool
	procs      map[string]*Proc // the latest process per instance
	pid        int
}

var (
	_ supervisor.Launcher = (*Workers)(nil)
	_ worker.Driver       = (*Workers)(nil)
)

// New returns fakes whose workers start logged in, except those named.
func New(loggedOut ...string) *Workers {
	f := &Workers{loggedOut: map[string]bool{}, failLaunch: map[string]bool{}, procs: map[string]*Proc{}}
	for _, n := range loggedOut {
		f.loggedOut[n] = true
	}
	return f
}

// Command names the instance, which Launch reads back.
func (f *Workers) Command(ep worker.Endpoint) []string { return []string{"fake-worker", ep.Name} }

// ErrLaunch is what Launch returns for an instance set to fail.
var ErrLaunch = errors.New("fake launch refused")

// Launch starts a fake process for the instance in spec.Argv[1].
func (f *Workers) Launch(spec supervisor.ProcSpec) (supervisor.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := spec.Argv[1]
	if f.failLaunch[name] {
		return nil, ErrLaunch
	}
	f.pid++
	p := &Proc{pid: f.pid, exited: make(chan struct{})}
	f.procs[name] = p
	return p, nil
}

// Connect returns the instance's backend at once.
func (f *Workers) Connect(_ context.Context, ep worker.Endpoint) (worker.Backend, error) {
	return &Backend{f: f, name: ep.Name}, nil
}

// Crash makes the instance's latest process exit by itself.
func (f *Workers) Crash(name string) {
	f.mu.Lock()
	p := f.procs[name]
	f.mu.Unlock()
	if p != nil {
		p.exit()
	}
}

// Exited is closed when the instance's latest process has exited (nil
// before its first start): a fake turn ends with it, as a real one does
// when its worker dies.
func (f *Workers) Exited(name string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[name]; p != nil {
		return p.exited
	}
	return nil
}

// SetLoggedIn logs the instance in or out, as its next health check sees.
func (f *Workers) SetLoggedIn(name string, in bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loggedOut[name] = !in
}

// FailLaunches makes every start of the instance fail (or succeed again).
func (f *Workers) FailLaunches(name string, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLaunch[name] = fail
}

// Proc is a fake process: it exits 50 ms after SIGINT, as a worker
// finishing its shutdown, and at once on SIGKILL.
type Proc struct {
	pid    int
	once   sync.Once
	exited chan struct{}
}

func (p *Proc) Pid() int                { return p.pid }
func (p *Proc) Wait() error             { <-p.exited; return nil }
func (p *Proc) Exited() <-chan struct{} { return p.exited }
func (p *Proc) exit()                   { p.once.Do(func() { close(p.exited) }) }

func (p *Proc) Signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGKILL:
		p.exit()
	case syscall.SIGINT:
		time.AfterFunc(50*time.Millisecond, p.exit)
	}
	return nil
}

// Backend is one fake worker connection.
type Backend struct {
	f    *Workers
	name string
}

// Status answers with the test's Health, or reports the instance logged in
// unless the test logged it out.
func (b *Backend) Status(ctx context.Context) (worker.AuthState, error) {
	if b.f.Health != nil {
		return b.f.Health(ctx, b.name)
	}
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	return worker.AuthState{LoggedIn: !b.f.loggedOut[b.name]}, nil
}

// Start answers with the test's Start, or "ok".
func (b *Backend) Start(ctx context.Context, t *chat.Turn) (chat.Answer, error) {
	if b.f.Start != nil {
		return b.f.Start(ctx, b.name, t)
	}
	return chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "ok"},
		chat.Event{Type: chat.EventDone, Finish: chat.FinishStop}), nil
}

// Capabilities: the fakes list models and log in through a (fake) page.
func (b *Backend) Capabilities() worker.Capabilities {
	return worker.Capabilities{Models: true, BrowserLogin: true}
}

// RawModels is unsupported.
func (b *Backend) RawModels(context.Context) (json.RawMessage, []chat.Model, error) {
	return nil, nil, worker.ErrUnsupported
}

// DeleteSession is unsupported: the fakes keep no sessions.
func (b *Backend) DeleteSession(context.Context, string) error { return worker.ErrUnsupported }

// Models lists the fakes' Models.
func (b *Backend) Models(context.Context) ([]chat.Model, error) { return b.f.Models, nil }

// LoginURL names the instance.
func (b *Backend) LoginURL(context.Context) (string, error) {
	return "http://login.invalid/" + b.name, nil
}

// Close does nothing.
func (b *Backend) Close() error { return nil }

// Continues answers with the test's Continues, or true: every turn may
// continue an upstream session.
func (b *Backend) Continues(t *chat.Turn) bool {
	return b.f.Continues == nil || b.f.Continues(b.name, t)
}

// Loginer records every login the supervisor asks for.
type Loginer struct {
	mu      sync.Mutex
	targets map[string][]supervisor.LoginTarget
}

var _ supervisor.Loginer = (*Loginer)(nil)

// Ensure records t.
func (l *Loginer) Ensure(t supervisor.LoginTarget) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.targets == nil {
		l.targets = map[string][]supervisor.LoginTarget{}
	}
	l.targets[t.Instance] = append(l.targets[t.Instance], t)
}

// Asked returns the instances a login was asked for, with the last target
// of each.
func (l *Loginer) Asked() map[string]supervisor.LoginTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]supervisor.LoginTarget{}
	for name, ts := range l.targets {
		out[name] = ts[len(ts)-1]
	}
	return out
}

// Names returns the instances a login was asked for, sorted.
func (l *Loginer) Names() []string { return slices.Sorted(maps.Keys(l.Asked())) }
