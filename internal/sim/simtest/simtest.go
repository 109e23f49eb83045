// Package simtest runs the simulated worker inside a test's own process, for
// the tests of the drivers and the login runner that talk to a real
// simulator without spawning one.
package simtest

import (
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/sim"
)

// Run starts sim.Main with args (its command line without the binary) and
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
