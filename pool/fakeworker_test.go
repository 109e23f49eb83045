package pool

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
)

// fakeWorkers is an in-memory Launcher and Driver: its processes and
// backends live in the test's goroutines, so the real supervisor runs them
// inside a synctest bubble.
type fakeWorkers struct {
	mu        sync.Mutex
	loggedOut map[string]bool      // by instance; missing: logged in
	procs     map[string]*fakeProc // the latest process per instance
	pid       int
}

func newFakeWorkers(loggedOut ...string) *fakeWorkers {
	f := &fakeWorkers{loggedOut: map[string]bool{}, procs: map[string]*fakeProc{}}
	for _, n := range loggedOut {
		f.loggedOut[n] = true
	}
	return f
}

func (f *fakeWorkers) Command(ep Endpoint) []string { return []string{"fake-worker", ep.Name} }

func (f *fakeWorkers) Launch(spec ProcSpec) (Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pid++
	p := &fakeProc{pid: f.pid, exited: make(chan struct{})}
	f.procs[spec.Argv[1]] = p
	return p, nil
}

func (f *fakeWorkers) Connect(_ context.Context, ep Endpoint) (Backend, error) {
	return fakeBackend{f: f, name: ep.Name}, nil
}

// crash makes the instance's process exit by itself.
func (f *fakeWorkers) crash(name string) {
	f.mu.Lock()
	p := f.procs[name]
	f.mu.Unlock()
	p.exit()
}

// fakeProc exits 50 ms after SIGINT, as a worker finishing its shutdown,
// and at once on SIGKILL.
type fakeProc struct {
	pid    int
	once   sync.Once
	exited chan struct{}
}

func (p *fakeProc) Pid() int                { return p.pid }
func (p *fakeProc) Wait() error             { <-p.exited; return nil }
func (p *fakeProc) Exited() <-chan struct{} { return p.exited }
func (p *fakeProc) exit()                   { p.once.Do(func() { close(p.exited) }) }

func (p *fakeProc) Signal(sig syscall.Signal) error {
	switch sig {
	case syscall.SIGKILL:
		p.exit()
	case syscall.SIGINT:
		time.AfterFunc(50*time.Millisecond, p.exit)
	}
	return nil
}

type fakeBackend struct {
	f    *fakeWorkers
	name string
}

func (b fakeBackend) Status(context.Context) (AuthState, error) {
	b.f.mu.Lock()
	defer b.f.mu.Unlock()
	return AuthState{LoggedIn: !b.f.loggedOut[b.name]}, nil
}

func (fakeBackend) Chat(context.Context, *chat.Turn) (<-chan chat.Event, error) {
	return nil, errors.New("fake worker")
}

func (fakeBackend) Close() error { return nil }

func (b fakeBackend) LoginURL(context.Context) (string, error) {
	return "http://login.invalid/" + b.name, nil
}

// fakeLoginer records every login the supervisor asks for.
type fakeLoginer struct {
	mu      sync.Mutex
	targets map[string][]LoginTarget
}

func (l *fakeLoginer) Ensure(t LoginTarget) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.targets == nil {
		l.targets = map[string][]LoginTarget{}
	}
	l.targets[t.Instance] = append(l.targets[t.Instance], t)
}

// asked returns the instances a login was asked for, and the last target
// of each.
func (l *fakeLoginer) asked() map[string]LoginTarget {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]LoginTarget{}
	for name, ts := range l.targets {
		out[name] = ts[len(ts)-1]
	}
	return out
}

// names returns the instances a login was asked for, sorted.
func (l *fakeLoginer) names() []string {
	return slices.Sorted(maps.Keys(l.asked()))
}

// fakePool is a pool of fake workers with test-speed timings; held keeps
// them stopped until a lease starts them.
func fakePool(t *testing.T, f *fakeWorkers, held bool, names ...string) (*Pool, *metrics.Metrics) {
	m := metrics.New(prometheus.NewRegistry())
	dir := t.TempDir()
	var wcs []WorkerConfig
	for _, n := range names {
		wcs = append(wcs, WorkerConfig{Name: n, Account: Account{Name: n}, WorkDir: dir + "/" + n, Held: held,
			AutoLogin: true, HealthInterval: 300 * time.Millisecond, StopGrace: time.Second})
	}
	return New(Config{}, wcs, f, f, m, slog.New(slog.NewTextHandler(io.Discard, nil))), m
}

// counter reads one sample of a counter vector.
func counter(t *testing.T, v *prometheus.CounterVec, label string) float64 {
	t.Helper()
	var pb dto.Metric
	if err := v.WithLabelValues(label).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}
