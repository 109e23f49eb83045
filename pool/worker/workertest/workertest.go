// Package workertest runs the simulated worker inside a test's own process
// (no process spawned) at a fresh endpoint, and connects a driver to it as
// the supervisor does, for the tests of the drivers and of the login
// runner.
package workertest

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/worker"
)

// Worker is a simulator running in the test's process and the endpoint a
// driver reaches it at.
type Worker struct {
	Endpoint worker.Endpoint
	// Stop cancels the simulator and waits for it (see Run).
	Stop func()
}

// Start runs the simulator at a fresh endpoint named name (a temporary work
// dir, two free loopback ports) with the command line args makes for that
// endpoint (without the binary), until the test ends. getenv, log and wait
// are as for Run.
func Start(t testing.TB, name string, args func(worker.Endpoint) []string, getenv func(string) string, log io.Writer, wait time.Duration) *Worker {
	t.Helper()
	ep := worker.Endpoint{Name: name, WorkDir: t.TempDir(), Port: testenv.FreePort(t), AuxPort: testenv.FreePort(t)}
	return &Worker{Endpoint: ep, Stop: Run(t, args(ep), getenv, log, wait)}
}

// Connect calls d.Connect until the worker at ep answers, as the supervisor
// does, for up to wait, and closes the backend when the test ends. B is the
// driver's own backend type.
func Connect[B worker.Backend](t testing.TB, d worker.Driver, ep worker.Endpoint, wait time.Duration) B {
	t.Helper()
	var b worker.Backend
	testenv.WaitForNoError(t, wait, "the worker to answer Connect", func() error {
		var err error
		b, err = d.Connect(context.Background(), ep)
		return err
	})
	t.Cleanup(func() { _ = b.Close() })
	c, ok := b.(B)
	if !ok {
		t.Fatalf("Connect returned a %T, want a %T", b, c)
	}
	return c
}

// Run starts sim.Main with args (its command line without the binary, to
// which --directives is added: the tests steer it with [[sim:...]]) and
// returns a stop that cancels it and waits up to wait for it to end; stop
// also runs at the test's cleanup and is safe to call twice. getenv may be
// nil (an empty environment); log receives the simulator's output (nil
// discards it).
func Run(t testing.TB, args []string, getenv func(string) string, log io.Writer, wait time.Duration) (stop func()) {
	t.Helper()
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	if log == nil {
		log = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args = append(slices.Clip(args), "--directives")
	go func() { done <- sim.Main(ctx, args, getenv, log, log) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("sim.Main: %v", err)
				}
			case <-time.After(wait):
				t.Errorf("simulator did not stop within %s", wait)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
