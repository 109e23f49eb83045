package testenv

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// readyTimeout bounds how long a redis-server may take to answer PING.
const readyTimeout = 10 * time.Second

// RedisServer is a real redis-server process owned by one test.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	port int

	// conf, when set, is a config file passed first (a sentinel's, which
	// Sentinel rewrites); args follow the common arguments.
	conf string
	args []string
	// lock, when set, locks the server (RedisLock).
	lock *RedisLock

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Redis starts a redis-server on a free loopback port with no persistence,
// waits until it answers PING and kills it when the test ends. It fails the
// test when redis-server is not installed.
func Redis(t testing.TB) *RedisServer {
	t.Helper()
	return startRedis(t, "", nil, nil)
}

// startRedis starts a redis-server with conf (a config file, or "") and
// args, locked with lock when it is not nil, like Redis.
func startRedis(t testing.TB, conf string, args []string, lock *RedisLock) *RedisServer {
	t.Helper()
	s := &RedisServer{t: t, bin: redisBin(t, "redis-server"), dir: t.TempDir(), args: args, lock: lock}
	if conf != "" {
		s.conf = filepath.Join(s.dir, "redis.conf")
		if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
			t.Fatalf("write redis config: %v", err)
		}
	}
	t.Cleanup(s.Kill)
	// Another process may grab the free port before redis binds it; try a
	// few ports before giving up.
	for attempt := 1; ; attempt++ {
		s.port = FreePort(t)
		err := s.start()
		if err == nil {
			return s
		}
		if attempt == 3 {
			t.Fatalf("start redis-server: %v", err)
		}
	}
}

// redisBin finds a program of the redis-server package or fails the test
// saying how to install it.
func redisBin(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found on PATH: install it with 'apt-get install redis-server' or run 'make test', which installs it", name)
	}
	return bin
}

// Port returns the server's port.
func (s *RedisServer) Port() int { return s.port }

// Addr returns the server's host:port.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Client returns a plain go-redis client of the server, closed when the
// test ends: for looking behind a store's back.
func (s *RedisServer) Client(t testing.TB) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.Addr()}
	if s.lock != nil {
		o.Password, o.TLSConfig = s.lock.Password, s.lock.TLSConfig()
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// KeyPrefix is a key prefix of the test's own, so the tests of a package
// can share one server.
func KeyPrefix(t testing.TB) string { return "t:" + strings.ReplaceAll(t.Name(), " ", "_") + ":" }

// URL returns the server's address as a redis:// URL for database 0; a
// locked server's is rediss:// with its password.
func (s *RedisServer) URL() string {
	if s.lock != nil {
		return "rediss://" + userinfo(s.lock.Password) + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// Log returns the end of the server's log file, for failure messages.
func (s *RedisServer) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return tail(string(b), 3000)
}

// Kill stops the server with SIGKILL and waits for it to exit. Killing a
// stopped server does nothing.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Restart kills the server if it runs and starts a fresh, empty one on the
// same port, waiting until it answers PING.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("restart redis-server: %v", err)
	}
}

// Freeze stops the server with SIGSTOP: it keeps its connections and port but
// answers nothing, like a hung server. Thaw resumes it.
func (s *RedisServer) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a server stopped by Freeze.
func (s *RedisServer) Thaw() { s.signal(syscall.SIGCONT) }

func (s *RedisServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("signal redis-server: not running")
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal redis-server: %v", err)
	}
}

func (s *RedisServer) start() error {
	logFile := filepath.Join(s.dir, "redis.log")
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	if s.lock != nil {
		args = append(args, s.lock.serverArgs(strconv.Itoa(s.port))...)
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	args = append(args, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", logFile)
	cmd := exec.Command(s.bin, append(args, s.args...)...)
	// Take the server down with the test binary if it dies without cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { // ends when the process exits; Kill waits for it
		_ = cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := s.waitReady(done); err != nil {
		s.Kill()
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("port %d: %w; log:\n%s", s.port, err, tail(string(log), 2000))
	}
	return nil
}

// waitReady polls with PING until the server answers, exits, or time runs out.
func (s *RedisServer) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		err := ping(s.Addr(), s.lock)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited before it was ready")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		}
	}
}

// ping speaks just enough RESP to check readiness without a client
// library: over TLS with the password when l is set.
func ping(addr string, l *RedisLock) error {
	what, cmds, want := "PING", "PING\r\n", []string{"+PONG"}
	var c net.Conn
	var err error
	if l != nil {
		what, cmds, want = "AUTH, PING", "AUTH "+l.Password+"\r\n"+cmds, []string{"+OK", "+PONG"}
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, l.TLSConfig())
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, cmds); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	for _, w := range want {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != w {
			return fmt.Errorf("%s answered %q", what, strings.TrimSpace(line))
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
