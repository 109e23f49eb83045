package hostile_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// Issue 45's second and third findings: what a client holds by not
// reading, or not sending. A request's body budget was given back only when
// its handler returned, and a non-streamed answer had no write deadline, so
// a client that never read its answer held its reservation (and the answer,
// several times its body) for as long as it kept the connection; and the
// budget was reserved for the whole announced length before a byte
// arrived, so a few requests that announced large bodies and sent nothing
// took all of it for the body timeout.

// The keys of the two clients: the one that holds, and the one that must
// still be served.
const (
	holderKey = "sk-holder"
	otherKey  = "sk-other"
)

// twoKeys is the API keys setting with the holder's and the other's keys.
const twoKeys = `POOLGATE_API_KEYS=[{"name":"holder","key":"` + holderKey + `"},{"name":"other","key":"` + otherKey + `"}]`

// dialSmall opens a connection whose receive buffer is as small as the
// kernel allows: what the client does not read stays with the server.
func dialSmall(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// otherServed sends a 20 KB chat with the other key and returns its status.
func otherServed(t *testing.T, d *daemontest.Daemon) int {
	t.Helper()
	body := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("b", 20000) + `"}]}`
	req, _ := http.NewRequest("POST", d.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+otherKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("the other key's request: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// rss is the daemon's resident size in bytes, from /proc.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestUnreadAnswersAreLetGo: four requests that fill the body budget (the
// key's share is the whole of it here), each echoed back as a 15 MB answer
// that the client never reads. The answers' writes time out after
// write_timeout (plus a second per MiB), the requests end, and the budget
// and the answers' memory go back: the other key is served again. Before,
// the budget stayed full (and the other key refused with 429) for as long
// as the client held its connections.
func TestUnreadAnswersAreLetGo(t *testing.T) {
	const size, n = 15_000_000, 4
	d := daemontest.StartDaemon(t, twoKeys, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_BODY_BUDGET_BYTES="+strconv.Itoa(n*size), "POOLGATE_BODY_BUDGET_PER_KEY="+strconv.Itoa(n*size),
		"POOLGATE_WRITE_TIMEOUT=2s")
	d.WaitReady(t, 20*time.Second)
	rss0, goroutines := rss(t, d.Pid()), metric(t, d, "go_goroutines")
	head, tail := `{"model":"m","messages":[{"role":"user","content":"`, `"}]}`
	body := head + strings.Repeat("a", size-len(head)-len(tail)) + tail
	for range n {
		c := dialSmall(t, d.Addr)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
			holderKey, len(body), body)
	}
	testenv.WaitFor(t, 30*time.Second, "the four bodies held", func() bool {
		return metric(t, d, "poolgate_request_body_bytes") == n*size
	})
	if code := otherServed(t, d); code != http.StatusTooManyRequests {
		t.Logf("the other key got %d while the budget was full, want 429", code)
	}
	peak := rss(t, d.Pid())
	start := time.Now()
	testenv.WaitFor(t, 60*time.Second, "the budget given back", func() bool {
		peak = max(peak, rss(t, d.Pid()))
		return metric(t, d, "poolgate_request_body_bytes") == 0
	})
	t.Logf("budget back %s after it was full; RSS %d MB before, %d MB at the peak, %d MB now",
		time.Since(start).Round(time.Second), rss0>>20, peak>>20, rss(t, d.Pid())>>20)
	if code := otherServed(t, d); code != http.StatusOK {
		t.Errorf("the other key got %d with the holder's connections still open, want 200", code)
	}
	testenv.WaitFor(t, 10*time.Second, "the four requests' goroutines ended", func() bool {
		return metric(t, d, "go_goroutines") <= goroutines+5
	})
}

// TestStalledBodiesOfOneKeyLeaveRoom: four requests of one key that
// announce 16,777,000-byte bodies and send nothing reserve at most the
// key's share of the budget (half of it), so the other key is served
// meanwhile. Before, they reserved the whole 64 MiB at once and the other
// key got 429 for the whole body timeout.
func TestStalledBodiesOfOneKeyLeaveRoom(t *testing.T) {
	const budget = 64 << 20
	d := daemontest.StartDaemon(t, twoKeys, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_BODY_BUDGET_BYTES="+strconv.Itoa(budget), "POOLGATE_BODY_TIMEOUT=30s")
	d.WaitReady(t, 20*time.Second)
	for range 4 {
		c := dialSmall(t, d.Addr)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 16777000\r\n\r\n{",
			holderKey)
	}
	time.Sleep(500 * time.Millisecond) // the four are read and wait for their bodies
	if held := metric(t, d, "poolgate_request_body_bytes"); held > budget/2 {
		t.Errorf("%v bytes of the budget held by one key's four stalled bodies, more than its half", held)
	}
	for i := range 3 {
		if code := otherServed(t, d); code != http.StatusOK {
			t.Errorf("the other key's request %d got %d while four announced bodies stalled, want 200", i, code)
		}
	}
}
