// Package testenv starts the real services poolgate's tests run against (a
// redis-server on a loopback port, in each of its deployments) and tears
// them down with the test, and is the one way tests wait for something (WaitFor). A test that
// needs a service that is not installed fails with a message saying how to
// install it; it never skips. The daemon itself is started by
// cmd/poolgate/daemontest, beside the wiring; PoolgateBin is the binary both
// spawn.
package testenv

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Buffer is a log sink tests can read while a server writes to it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// OpErrors counts a store's OnError calls by operation; it is safe for
// concurrent use. Pass its Add as the OnError hook.
type OpErrors struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts one failed op.
func (c *OpErrors) Add(op string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[op]++
}

// Get returns how often op failed.
func (c *OpErrors) Get(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[op]
}

func (c *OpErrors) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.n)
}

// WaitFor polls cond until it holds, failing the test after d. It is the
// one way tests wait for something to happen: polls come every millisecond
// at first, backing off to every 50 ms, so a quick condition costs no
// fixed sleep and a slow one no busy loop.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !poll(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// WaitForNoError is WaitFor for a step that fails until it succeeds (a
// connect, a read): it polls try until it returns nil, failing the test
// after d with try's last error.
func WaitForNoError(t testing.TB, d time.Duration, what string, try func() error) {
	t.Helper()
	var err error
	if !poll(d, func() bool { err = try(); return err == nil }) {
		t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
	}
}

// poll calls cond until it holds (true) or d has passed (false).
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(pause*2, 50*time.Millisecond)
	}
	return true
}

// InOrder reports whether every part occurs in s, each after the one before.
func InOrder(s string, parts []string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}

// SameFields checks that a decoder reported exactly want as dropped (in any
// order), and that each is among the declared fields its counter is
// initialised with.
func SameFields(t testing.TB, got, want, declared []string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(g, w) {
		t.Errorf("dropped = %v, want %v", g, w)
	}
	for _, f := range g {
		if !slices.Contains(declared, f) {
			t.Errorf("dropped field %q is not declared (its counter series would be missing)", f)
		}
	}
}
