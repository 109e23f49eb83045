package httpx

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// serveConns runs h behind Deadlines on a loopback listener guarded by
// conns, until the test ends.
func serveConns(t *testing.T, h http.Handler, conns *Conns) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := conns.Guard()
	srv := &http.Server{Handler: Deadlines(h, time.Minute), ReadHeaderTimeout: 5 * time.Second, ConnContext: g.ConnContext}
	go func() { _ = srv.Serve(g.Listen(lis)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String()
}

// keyed trusts each request with the key in its X-Key header, and answers
// 204, or 429 and closes the connection when the key holds its share.
var keyed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if !Trust(r.Context(), r.Header.Get("X-Key")) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.WriteHeader(http.StatusNoContent)
})

// conn is a client connection kept open, whose requests name a key.
type conn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialConn(t *testing.T, addr string) *conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{c: c, br: bufio.NewReader(c)}
}

// ask sends one request with key and returns its status (0: the connection
// was closed without an answer).
func (c *conn) ask(t *testing.T, key string) int {
	t.Helper()
	fmt.Fprintf(c.c, "GET / HTTP/1.1\r\nHost: x\r\nX-Key: %s\r\n\r\n", key)
	_ = c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConnsPerKey: a key holds at most MaxPerKey connections; a request
// past it is refused, while other keys and callers of no key are served,
// and a key's closed connection makes room for a new one.
func TestConnsPerKey(t *testing.T) {
	conns := NewConns(ConnConfig{MaxPerKey: 2, MaxUnauthenticated: 100}, ConnMetrics{})
	addr := serveConns(t, keyed, conns)
	a1, a2, a3 := dialConn(t, addr), dialConn(t, addr), dialConn(t, addr)
	steps := []struct {
		c    *conn
		key  string
		want int
	}{
		{a1, "a", 204},
		{a2, "a", 204},
		{a1, "a", 204}, // the same connection again
		{a3, "a", 429},
		{dialConn(t, addr), "b", 204},
		{dialConn(t, addr), "", 204},
	}
	for i, s := range steps {
		if got := s.c.ask(t, s.key); got != s.want {
			t.Fatalf("step %d: key %q answered %d, want %d", i, s.key, got, s.want)
		}
	}
	a1.c.Close()
	testWait(t, "a's closed connection and the refused one uncounted", func() bool { return conns.Open() == 3 })
	if got := dialConn(t, addr).ask(t, "a"); got != 204 {
		t.Errorf("a new connection of a after one closed: %d, want 204", got)
	}
}

// TestConnsMax: with Max connections open, a new one pushes out the oldest
// that showed no credential, else is closed itself.
func TestConnsMax(t *testing.T) {
	conns := NewConns(ConnConfig{Max: 3, MaxUnauthenticated: 100}, ConnMetrics{})
	addr := serveConns(t, keyed, conns)
	silent := dialConn(t, addr) // never sends a request
	time.Sleep(20 * time.Millisecond)
	for range 2 {
		if got := dialConn(t, addr).ask(t, ""); got != 204 {
			t.Fatalf("a trusted connection: %d", got)
		}
	}
	if got := dialConn(t, addr).ask(t, ""); got != 204 {
		t.Fatalf("a fourth connection: %d, want 204 (the silent one makes room)", got)
	}
	_ = silent.c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := silent.c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("the silent connection: %v, want it closed", err)
	}
	if got := dialConn(t, addr).ask(t, ""); got != 0 {
		t.Errorf("a connection past three trusted ones: %d, want it closed unanswered", got)
	}
	if n := conns.Open(); n != 3 {
		t.Errorf("%d connections counted, want 3", n)
	}
}

// TestUnreadAnswerTimesOut: a client that stops reading makes the answer's
// write fail after WriteTimeout (the write set no deadline of its own),
// so the handler returns and what it held is let go.
func TestUnreadAnswerTimesOut(t *testing.T) {
	failed := make(chan error, 1)
	flood := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				failed <- err
				return
			}
		}
	})
	addr := serveConns(t, flood, NewConns(ConnConfig{WriteTimeout: 200 * time.Millisecond, MaxUnauthenticated: 10}, ConnMetrics{}))
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-failed:
		if !errors.Is(err, syscall.ETIMEDOUT) && !isTimeout(err) {
			t.Logf("the write failed with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer's write still blocks after 10s: no write deadline")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// testWait polls cond for up to 5s.
func testWait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
