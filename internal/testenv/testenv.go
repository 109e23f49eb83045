// Package testenv starts the real services poolgate's tests run against (a
// redis-server on a loopback port) and tears them down with the test. A test
// that needs a service that is not installed fails with a message saying how
// to install it; it never skips.
package testenv

import (
	"net"
	"testing"
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
