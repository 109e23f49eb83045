package hostile_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// Connections that present no credential, issue 35's third finding: a
// client that announced a body and never sent it used to hold its
// connection forever (the refusal waited for the body); now every
// connection has its deadlines before anything checks who is calling, a
// refusal with an unread body closes at once, and each listener keeps at
// most max_unauthenticated_conns connections that showed no key.

const bodyTimeout = 2 * time.Second

// holdPartial opens a connection that sends the request's headers,
// announcing a body of n bytes, and only the body's first byte.
func holdPartial(addr, method, path string, n int) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
		method, path, addr, n)
	return c, err
}

// answered reads c's answer: its status (0 when the server closed the
// connection without one) and whether the connection is closed after it,
// or fails the test when nothing happened within wait.
func answered(t *testing.T, c net.Conn, wait time.Duration) (int, bool) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("no answer and no close within %s", wait)
		}
		return 0, true
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_, err = br.ReadByte()
	return resp.StatusCode, err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestSlowBodyWithoutCredential: on the API listener and the admin
// listener (which also serves /metrics), a request with no credential
// whose body never arrives gets its answer and the connection is closed
// within the body timeout: at once for a refusal, and /healthz (which
// needs no credential) answers without waiting for the body either.
func TestSlowBodyWithoutCredential(t *testing.T) {
	adminAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_BODY_TIMEOUT="+bodyTimeout.String(), "POOLGATE_ADMIN_LISTEN="+adminAddr)
	tests := []struct {
		name, addr, method, path string
		want                     int
	}{
		{"chat", d.Addr, "POST", "/v1/chat/completions", 401},
		{"anthropic", d.Addr, "POST", "/v1/messages", 401},
		{"healthz", d.Addr, "GET", "/healthz", 200},
		{"admin", adminAddr, "POST", "/internal/pool/sim-1/restart", 401},
		{"metrics", adminAddr, "GET", "/metrics", 401},
		{"admin healthz", adminAddr, "GET", "/healthz", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := holdPartial(tt.addr, tt.method, tt.path, 200<<10) // under net/http's 256 KiB drain
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			start := time.Now()
			code, closed := answered(t, c, bodyTimeout+3*time.Second)
			if code != tt.want || !closed {
				t.Errorf("answer %d, connection closed %v after %s; want %d, then closed", code, closed, time.Since(start), tt.want)
			}
		})
	}
}

// TestUnauthenticatedConnectionsDoNotStopAKeyedClient holds many
// connections without a credential on a daemon that may open only 256
// files: some announce a body they never send, some never finish their
// headers (a slow-loris). A keyed client is still served, on new
// connections, throughout.
func TestUnauthenticatedConnectionsDoNotStopAKeyedClient(t *testing.T) {
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Fatal("this test lowers the daemon's open-file limit with prlimit: apt-get install util-linux")
	}
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, "POOLGATE_BODY_TIMEOUT=30s",
		"POOLGATE_MAX_UNAUTHENTICATED_CONNS=64")
	d.WaitReady(t, 20*time.Second)
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(d.Pid()), "--nofile=256:256").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v %s", err, out)
	}
	keyed := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	serve := func(when string) {
		t.Helper()
		for i := range 3 {
			req, _ := http.NewRequest("POST", d.URL+"/v1/chat/completions", bytes.NewReader(chat("")()))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			start := time.Now()
			resp, err := keyed.Do(req)
			if err != nil {
				t.Fatalf("%s, keyed request %d: %v", when, i, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || time.Since(start) > 5*time.Second {
				t.Fatalf("%s, keyed request %d: %d after %s", when, i, resp.StatusCode, time.Since(start))
			}
		}
	}
	const n = 400 // beyond what 256 files allow
	var mu sync.Mutex
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	open := func(raw string) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
				if err != nil {
					return // the kernel's queue is full: the attack is as large as it gets
				}
				_, _ = io.WriteString(c, raw)
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	// Headers and the start of a body, no key: each is refused and closed
	// at once.
	open("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200000\r\n\r\n{")
	serve("with slow bodies held")
	// Headers that never end.
	open("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthoriz")
	serve("with slow headers held")
	if got := metric(t, d, "poolgate_unauthenticated_conns_closed_total"); got < 1 {
		t.Errorf("%v connections closed past the limit, want some", got)
	}
}

// holdKeyed opens n connections at once, each with a GET /v1/models of the
// holder's key, kept open until the test ends, and counts their answers'
// statuses (0: closed without one).
func holdKeyed(t *testing.T, d *daemontest.Daemon, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", d.Addr, 5*time.Second)
			if err != nil {
				return
			}
			fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", holderKey)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			code := 0
			if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
				code = resp.StatusCode
				_, _ = io.Copy(io.Discard, resp.Body)
			}
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			t.Cleanup(func() { c.Close() })
		})
	}
	wg.Wait()
	return codes
}

// TestOneKeyCannotHoldEveryConnection is issue 45's fourth finding: a
// connection that showed a key was never counted again, and GET /v1/models
// (no rpm or concurrency limit) kept it from going idle, so one user key
// held 396 connections of a daemon allowed 400 files, and /healthz and the
// other keys' requests timed out. On a daemon started with that limit
// (prlimit, before it starts), one key gets at most its share of the
// connections the limit leaves (max_conns_per_key): its requests past it
// are refused with 429 in its protocol and their connections closed, while
// /healthz and the other key are served, each within 5 s, on new
// connections.
func TestOneKeyCannotHoldEveryConnection(t *testing.T) {
	d := daemontest.StartDaemonNoFile(t, 400, twoKeys, "POOLGATE_ADMIN_TOKEN="+adminToken)
	d.WaitReady(t, 20*time.Second)
	const n = 396
	codes := holdKeyed(t, d, n)
	t.Logf("the holder's %d connections: %v (status: count; 0 = no answer)", n, codes)
	if codes[http.StatusTooManyRequests] == 0 {
		t.Errorf("no request of the holder's %d connections was refused: %v", n, codes)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		start := time.Now()
		resp, err := client.Get(d.URL + "/healthz")
		if err != nil {
			t.Fatalf("/healthz %d with the holder's connections open: %v", i, err)
		}
		resp.Body.Close()
		req, _ := http.NewRequest("POST", d.URL+"/v1/chat/completions", bytes.NewReader(chat("")()))
		req.Header.Set("Authorization", "Bearer "+otherKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err = client.Do(req)
		if err != nil {
			t.Fatalf("the other key's request %d with the holder's connections open: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || time.Since(start) > 5*time.Second {
			t.Errorf("the other key's request %d: %d after %s", i, resp.StatusCode, time.Since(start))
		}
	}
	refused := metric(t, d, "poolgate_key_conns_refused_total")
	// The holder's refused request came in its protocol: OpenAI's shape.
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", holderKey)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the holder's next connection: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || !hasShape(b, openAI) || !resp.Close || metric(t, d, "poolgate_key_conns_refused_total") != refused+1 {
		t.Errorf("the holder's next connection: %d %s (closed %v), want 429 in OpenAI's shape and the connection closed",
			resp.StatusCode, clip(b), resp.Close)
	}
}
