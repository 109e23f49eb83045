package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/deploy"
	"github.com/poolgate/poolgate/internal/testenv"
)

// nginxBin finds Debian's nginx; a test that needs it fails without it.
func nginxBin(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/sbin/nginx", "nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatalf("nginx not found: install it with 'apt-get install nginx' or run 'make test'")
	return ""
}

// renderNginx writes deploy/nginx.conf with loopback upstreams into a fresh
// prefix dir and returns the nginx arguments that use it (no root paths).
func renderNginx(t *testing.T, listen string, upstreams ...string) []string {
	t.Helper()
	conf, err := deploy.NginxConfig(listen, upstreams)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-e", "stderr", "-p", dir + "/", "-c", path, "-g", "pid " + filepath.Join(dir, "nginx.pid") + "; error_log stderr;"}
}

func TestNginxConfigIsValid(t *testing.T) {
	bin := nginxBin(t)
	args := renderNginx(t, "127.0.0.1:18080", "127.0.0.1:18081", "127.0.0.1:18082")
	out, err := exec.Command(bin, append([]string{"-t"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
}

func TestNginxConfigRender(t *testing.T) {
	conf, err := deploy.NginxConfig("127.0.0.1:9999", []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(conf)
	if strings.Contains(s, "poolgate-1:8080") || strings.Contains(s, "listen 8080;") {
		t.Errorf("the rendered config still names the compose upstreams or port:\n%s", s)
	}
	if got := strings.Count(s, "server 127.0.0.1:3 max_fails=2 fail_timeout=10s;"); got != 2 {
		t.Errorf("rendered %d server lines for 127.0.0.1:3 with their parameters, want 2 (one per upstream block)", got)
	}
	// The settings that make it safe for streams and retries.
	for _, want := range []string{
		"proxy_buffering off;", "proxy_cache off;", "proxy_http_version 1.1;", `proxy_set_header Connection "";`,
		"proxy_read_timeout 3600s;", "proxy_send_timeout 3600s;", "client_max_body_size 16m;",
		"proxy_next_upstream error timeout http_502 http_503", "proxy_set_header X-Request-Id",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("deploy/nginx.conf lacks %q", want)
		}
	}
	for _, bad := range []string{"/var/log", "/var/run", "\npid ", "include "} {
		if strings.Contains(s, bad) {
			t.Errorf("deploy/nginx.conf has %q, which a test without root cannot use", strings.TrimSpace(bad))
		}
	}
}

// TestNginxStreamsAndFailsOver runs Debian's nginx with the rendered config
// in front of one dead replica and one live one: requests get through, a
// stream reaches the client event by event, request ids pass, and bodies
// over the cap are refused.
func TestNginxStreamsAndFailsOver(t *testing.T) {
	bin := nginxBin(t)
	release := make(chan struct{})
	seen := make(chan string, 16)
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("X-Request-Id")
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path != "/v1/stream" {
			fmt.Fprintf(w, "ok %s\n", r.Method)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: one\n\n")
		http.NewResponseController(w).Flush()
		select { // the second event waits until the client has the first
		case <-release:
		case <-time.After(10 * time.Second):
		}
		fmt.Fprint(w, "data: two\n\n")
	}))
	t.Cleanup(live.Close)
	dead := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) // nothing listens there
	listen := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	startNginx(t, bin, renderNginx(t, listen, dead, strings.TrimPrefix(live.URL, "http://")), listen)
	base := "http://" + listen

	// Both methods get to the live replica, whichever one nginx tried first.
	for range 4 {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			req, _ := http.NewRequest(method, base+"/v1/models", strings.NewReader("{}"))
			req.Header.Set("X-Request-Id", "req-123")
			body := do(t, req, http.StatusOK)
			if want := "ok " + method + "\n"; body != want {
				t.Errorf("%s through nginx = %q, want %q", method, body, want)
			}
			if got := <-seen; got != "req-123" {
				t.Errorf("upstream saw X-Request-Id %q, want the client's req-123", got)
			}
		}
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/healthz", nil)
	do(t, req, http.StatusOK)
	if got := <-seen; !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(got) {
		t.Errorf("without a client X-Request-Id upstream saw %q, want one nginx made", got)
	}

	// A stream: the first event arrives while the upstream still holds the
	// second, so nothing buffers it.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/stream", strings.NewReader(`{"stream":true}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-seen
	rd := bufio.NewReader(res.Body)
	first := make(chan string, 1)
	go func() {
		line, _ := rd.ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		if line != "data: one\n" {
			t.Errorf("first stream line = %q, want %q", line, "data: one\n")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the first event did not reach the client while the upstream held the second: nginx buffers streams")
	}
	close(release)
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), "data: two") {
		t.Errorf("rest of the stream = %q, want the second event", rest)
	}

	// Replicas prove the cluster key to each other directly, never to a
	// client through nginx: 404 from nginx, nothing reaches a replica.
	req, _ = http.NewRequest(http.MethodGet, base+"/cluster/proof?challenge=c", nil)
	do(t, req, http.StatusNotFound)
	select {
	case got := <-seen:
		t.Errorf("a proof challenge through nginx reached a replica (request id %q)", got)
	default:
	}

	// Over client_max_body_size (16m): 413 from nginx itself.
	req, _ = http.NewRequest(http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(make([]byte, 17<<20)))
	do(t, req, http.StatusRequestEntityTooLarge)
}

func do(t *testing.T, req *http.Request, want int) string {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s = %d %s, want %d", req.Method, req.URL.Path, res.StatusCode, b, want)
	}
	return string(b)
}

// startNginx runs nginx in the foreground in its own process group, waits
// until it listens, and stops the group at cleanup.
func startNginx(t *testing.T, bin string, args []string, listen string) {
	t.Helper()
	args[len(args)-1] += " daemon off;"
	cmd := exec.Command(bin, args...)
	log := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = io.Discard, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGQUIT) // graceful: master and workers
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("nginx log:\n%s", log.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", listen, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-done:
			t.Fatalf("nginx exited at start:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s within 10s:\n%s", listen, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
