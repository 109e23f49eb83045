// Package testenv starts the real services poolgate's tests run against (a
// redis-server on a loopback port) and tears them down with the test. A test
// that needs a service that is not installed fails with a message saying how
// to install it; it never skips.
package testenv

import (
	"bytes"
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

// WaitFor polls cond every 50 ms until it holds, failing the test after d.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
