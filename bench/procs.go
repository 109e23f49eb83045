package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a process the harness started in its own process group, so that
// stopping it takes everything it started too. Pdeathsig kills it should the
// harness itself die without running its deferred stops.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startChild(name string, cmd *exec.Cmd, logPath string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = f.Close()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends sig to the process group, waits up to grace, then kills the
// group. Safe to call twice.
func (c *child) stop(sig syscall.Signal, grace time.Duration) {
	if c.exited() {
		return
	}
	_ = syscall.Kill(-c.pid(), sig)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
		<-c.done
	}
}

// logTail returns the last lines of the child's output, for error messages.
func (c *child) logTail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// gatewayConfig is how one poolgate under test is set up.
type gatewayConfig struct {
	// Accounts is the number of openai-simulator workers (default 1).
	Accounts int
	// PerInstance is POOLGATE_INSTANCE_MAX_IN_FLIGHT (default 256 turns).
	PerInstance int
	// RedisURL puts affinity on Redis; empty keeps it in memory.
	RedisURL string
	// Driver is POOLGATE_DRIVER (default openai: simworker --protocol=openai).
	Driver string
	// APIKeys is POOLGATE_API_KEYS, as JSON ("" = none).
	APIKeys string
}

// gateway is one running poolgate with its workers.
type gateway struct {
	*child
	cfg gatewayConfig
	url string
	// pprofURL is the gateway's loopback-only profiler.
	pprofURL string
	// idle is the memory right after every worker was ready, before load.
	idle memInfo
	// workers are the instances as /internal/pool listed them when ready.
	workers []instance
}

// instance is the part of /internal/pool the harness reads.
type instance struct {
	Name  string `json:"name"`
	State string `json:"state"`
	PID   int    `json:"pid"`
	Port  int    `json:"port"`
}

// startGateway runs bin with the openai driver on simulated workers and waits
// until every worker is ready.
func startGateway(ctx context.Context, bin, dir string, cfg gatewayConfig) (*gateway, error) {
	cfg.Accounts = max(cfg.Accounts, 1)
	if cfg.PerInstance <= 0 {
		cfg.PerInstance = 256
	}
	cfg.Driver = cmp.Or(cfg.Driver, "openai")
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pprofPort, err := freePort()
	if err != nil {
		return nil, err
	}
	var accts []map[string]string
	for i := range cfg.Accounts {
		n := strconv.Itoa(i + 1)
		accts = append(accts, map[string]string{"name": "bench-" + n, "username": "u" + n, "password": "p" + n})
	}
	accJSON, _ := json.Marshal(accts) // a slice of string maps always marshals
	env := []string{
		// The accounts are the bundled simulator's, which serves configured
		// accounts only when asked to.
		"POOLGATE_SIMULATE=true",
		"POOLGATE_SIM_DIRECTIVES=true", // the scenarios shape answers with [[sim:chunks=N]]
		"POOLGATE_DRIVER=" + cfg.Driver,
		"POOLGATE_PPROF_LISTEN=127.0.0.1:" + strconv.Itoa(pprofPort),
		"POOLGATE_ACCOUNTS=" + string(accJSON),
		"POOLGATE_INSTANCE_MAX_IN_FLIGHT=" + strconv.Itoa(cfg.PerInstance),
		"POOLGATE_MAX_IN_FLIGHT=" + strconv.Itoa(cfg.PerInstance*cfg.Accounts),
		"POOLGATE_MAX_QUEUE=10000",
		"POOLGATE_LISTEN=127.0.0.1:" + strconv.Itoa(port),
		"POOLGATE_DATA_DIR=" + dir,
		"POOLGATE_LOG_LEVEL=warn",
		"POOLGATE_SHUTDOWN_GRACE=2s",
	}
	if cfg.RedisURL != "" {
		env = append(env, "POOLGATE_REDIS_URL="+cfg.RedisURL, "POOLGATE_REDIS_PREFIX=bench:")
	}
	if cfg.APIKeys != "" {
		env = append(env, "POOLGATE_API_KEYS="+cfg.APIKeys, "POOLGATE_ADMIN_TOKEN="+benchAdminToken)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Dir = dir
	c, err := startChild("poolgate", cmd, filepath.Join(dir, "poolgate.log"))
	if err != nil {
		return nil, err
	}
	g := &gateway{child: c, cfg: cfg, url: "http://127.0.0.1:" + strconv.Itoa(port), pprofURL: "http://127.0.0.1:" + strconv.Itoa(pprofPort)}
	if err := g.waitReady(ctx, cfg.Accounts, 30*time.Second); err != nil {
		g.stop(syscall.SIGINT, 10*time.Second)
		return nil, fmt.Errorf("%w\n--- poolgate log ---\n%s", err, g.logTail())
	}
	if g.idle, err = procMem(g.pid()); err != nil {
		g.stop(syscall.SIGINT, 10*time.Second)
		return nil, err
	}
	return g, nil
}

// cleanEnv is the harness's environment without POOLGATE_* settings, so a
// developer's own configuration can't change what is measured.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "POOLGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

func (g *gateway) waitReady(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if g.exited() {
			return fmt.Errorf("poolgate exited before ready: %v", g.err)
		}
		ins, err := g.pool(ctx)
		ready := 0
		for _, in := range ins {
			if in.State == "ready" && in.Port > 0 {
				ready++
			}
		}
		if err == nil && ready == want {
			g.workers = ins
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("poolgate: %d workers not ready within %s", want, timeout)
}

// pool reads /internal/pool.
func (g *gateway) pool(ctx context.Context) ([]instance, error) {
	var out struct {
		Instances []instance `json:"instances"`
	}
	err := getJSON(ctx, g.url+"/internal/pool", &out)
	return out.Instances, err
}

// cacheMisses reads from /internal/stats how many follow-ups found no
// affinity entry. (Hits count reused upstream sessions, which OpenAI-style
// workers don't have: a found entry only routes the turn.)
func (g *gateway) cacheMisses(ctx context.Context) (int64, error) {
	var out struct {
		Cache struct {
			Misses int64 `json:"misses"`
		} `json:"cache"`
	}
	err := getJSON(ctx, g.url+"/internal/stats", &out)
	return out.Cache.Misses, err
}

// benchAdminToken opens the admin API of a gateway that has API keys.
const benchAdminToken = "bench-admin-token"

func getJSON(ctx context.Context, url string, v any) error {
	body, err := get(ctx, url, 2*time.Second)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}

// get fetches url within timeout and returns its body, failing on any
// status but 200. It sends the admin token, which a gateway without keys
// and the profiler ignore.
func get(ctx context.Context, url string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// startRedis runs a throwaway redis-server on a free loopback port.
func startRedis(ctx context.Context, dir string) (*child, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errors.New("redis-server not found: install it with `make deps` (apt-get install redis-server)")
	}
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	p := strconv.Itoa(port)
	cmd := exec.Command(bin, "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	c, err := startChild("redis-server", cmd, filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + p
	if err := c.waitReady(ctx, 5*time.Second, func() error { return redisPing(addr) }); err != nil {
		c.stop(syscall.SIGTERM, 5*time.Second)
		return nil, "", fmt.Errorf("redis-server did not answer PING: %w\n%s", err, c.logTail())
	}
	return c, "redis://" + addr + "/0", nil
}

// waitReady polls ready until it succeeds, and fails with its last error
// once limit passed, ctx ended or the child exited.
func (c *child) waitReady(ctx context.Context, limit time.Duration, ready func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if c.exited() || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisScriptCalls reads how many scripts (EVALSHA and EVAL) the server
// has run: each is one round trip of the gateway's, which runs every
// affinity step as one script.
func redisScriptCalls(addr string) (int64, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("INFO commandstats\r\n")); err != nil {
		return 0, err
	}
	br := bufio.NewReader(conn)
	head, err := br.ReadString('\n') // $<length>
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0, fmt.Errorf("INFO answered %q: %v", head, err)
	}
	size, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return 0, err
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return 0, err
	}
	var n int64
	for _, line := range strings.Split(string(body), "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}
