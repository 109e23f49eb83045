package httpx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// serve runs h behind Deadlines and a guard of limit on a loopback
// listener until the test ends, as the daemon serves every listener.
func serve(t *testing.T, h http.Handler, timeout time.Duration, limit int) (string, *ConnGuard) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewConnGuard(limit, nil)
	srv := &http.Server{Handler: Deadlines(h, timeout), ReadHeaderTimeout: 5 * time.Second, ConnContext: g.ConnContext}
	go func() { _ = srv.Serve(g.Listen(lis)) }()
	t.Cleanup(func() { _ = srv.Close() })
	return lis.Addr().String(), g
}

// partial sends a request that announces a body of n bytes and sends only
// its first bytes, then reads the answer: its status and whether the
// connection was closed after it, within wait.
func partial(t *testing.T, addr, path string, n int, wait time.Duration) (int, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"a\":", path, n)
	_ = c.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", wait, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	return resp.StatusCode, errors.Is(err, io.EOF)
}

// TestRefusalDoesNotWaitForTheBody is issue 35's slow body at the edge: a
// refusal written before the body was read (as Authorize writes a 401)
// goes out at once and closes the connection, though the client never
// sends the rest of the body it announced; without Deadlines net/http
// waits for it first, with no deadline.
func TestRefusalDoesNotWaitForTheBody(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no key", http.StatusUnauthorized)
	})
	addr, _ := serve(t, refuse, time.Minute, 10)
	start := time.Now()
	code, closed := partial(t, addr, "/v1/chat/completions", 200<<10, 10*time.Second)
	if code != http.StatusUnauthorized || !closed || time.Since(start) > 5*time.Second {
		t.Errorf("answer %d after %s, connection closed %v; want 401 at once and the connection closed", code, time.Since(start), closed)
	}
}

// TestLateBodyGetsItsTimeout: a handler that reads the body gets the read
// deadline's error once the body timeout passes, and its answer closes the
// connection.
func TestLateBodyGetsItsTimeout(t *testing.T) {
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("reading a late body: %v, want the deadline's error", err)
		}
		w.WriteHeader(http.StatusRequestTimeout)
	})
	addr, _ := serve(t, read, 300*time.Millisecond, 10)
	start := time.Now()
	code, closed := partial(t, addr, "/", 100, 10*time.Second)
	if code != http.StatusRequestTimeout || !closed || time.Since(start) > 5*time.Second {
		t.Errorf("answer %d after %s, connection closed %v; want 408 after the body timeout, then closed", code, time.Since(start), closed)
	}
}

// TestDeadlineEndsWithTheBody: once the body is read, its deadline no
// longer holds: an answer that takes longer than the body timeout (a
// stream) is not cut, and the connection is kept for the next request.
func TestDeadlineEndsWithTheBody(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case <-time.After(600 * time.Millisecond): // twice the body timeout
		case <-r.Context().Done():
			t.Error("the request was cancelled after its body was read")
		}
		_, _ = w.Write(b)
	})
	addr, _ := serve(t, slow, 300*time.Millisecond, 10)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 2 {
		resp, err := client.Post("http://"+addr+"/", "application/json", stringsReader(`{"n":1}`))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != `{"n":1}` || resp.Close {
			t.Errorf("request %d: answer %q, close %v; want the body echoed on a kept connection", i, b, resp.Close)
		}
	}
}

// TestGuardClosesTheOldestUntrusted: past its limit, the guard closes the
// oldest connection that presented no credential, never one that did.
func TestGuardClosesTheOldestUntrusted(t *testing.T) {
	trust := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Trust(r.Context(), "")
		w.WriteHeader(http.StatusNoContent)
	})
	addr, g := serve(t, trust, time.Minute, 3)
	// One connection presents a credential (a request that is trusted).
	keyed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer keyed.Close()
	fmt.Fprint(keyed, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	kr := bufio.NewReader(keyed)
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("the keyed request: %v", err)
	}
	// Five that never finish their headers.
	var idle []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "GET / HTTP/1.1\r\nHo")
		idle = append(idle, c)
		time.Sleep(20 * time.Millisecond) // accepted in this order
	}
	for i, c := range idle {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(make([]byte, 1))
		if closed := errors.Is(err, io.EOF); closed != (i < 2) {
			t.Errorf("connection %d: closed %v (%v), want only the two oldest closed", i, closed, err)
		}
	}
	if n := g.Untrusted(); n != 3 {
		t.Errorf("%d untrusted connections counted, want 3", n)
	}
	fmt.Fprint(keyed, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(kr, nil); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Errorf("the keyed connection after the others: %v", err)
	}
}

func stringsReader(s string) io.Reader { return &stringReader{s: s} }

// stringReader hides its length, so the client sends the body chunked.
type stringReader struct{ s string }

func (r *stringReader) Read(p []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	n := copy(p, r.s)
	r.s = r.s[n:]
	return n, nil
}

// TestRefusalOfALargeBodyIsRead: a refusal of a large body the client is
// still sending reaches the client: the close is graceful (a FIN, a pause),
// so Go's client reads the answer instead of failing its write on a reset.
func TestRefusalOfALargeBodyIsRead(t *testing.T) {
	refuse := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	})
	addr, _ := serve(t, refuse, time.Minute, 100)
	body := make([]byte, 16<<20)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	for i := range 10 {
		resp, err := client.Post("http://"+addr+"/", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("request %d: %v, want the 413", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("request %d: %d, want 413", i, resp.StatusCode)
		}
	}
}
