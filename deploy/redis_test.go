package deploy_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/testenv"
)

// The compose Redis's command and healthcheck, run as the container runs
// them (sh, with the secret's file) on a real redis-server: it serves only
// with the password, its healthcheck passes with the secret and fails with
// another one, and it refuses to start with an empty secret. The image's
// entrypoint (which only drops root) is left out, and the port and data
// directory are the test's.
func TestComposeRedisRunsWithItsPassword(t *testing.T) {
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found on PATH: install it with 'apt-get install redis-server' or run 'make test'")
	}
	s, err := loadCompose(t).GetService("redis")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	secret := filepath.Join(dir, "redis_password")
	port := strconv.Itoa(testenv.FreePort(t))
	local := strings.NewReplacer(redisSecretFile, secret, "exec docker-entrypoint.sh redis-server", "exec "+redisServer,
		"redis-cli ping", "redis-cli -p "+port+" ping")
	script := local.Replace(s.Command[len(s.Command)-1]) +
		" --port " + port + " --bind 127.0.0.1 --save '' --appendonly no --dir " + dir
	if s.Command[0] != "sh" || s.Command[1] != "-c" {
		t.Fatalf("redis command %v: want sh -c SCRIPT", s.Command)
	}

	writeSecret(t, secret, "")
	out, err := exec.Command("sh", "-c", script).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "set REDIS_PASSWORD in .env") {
		t.Errorf("with an empty secret: %v %s, want a refusal naming REDIS_PASSWORD", err, out)
	}

	const password = "0f3a9c2e7b"
	writeSecret(t, secret, password+"\n") // as a file written by hand ends
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Password: password})
	defer c.Close()
	testenv.WaitForNoError(t, 20*time.Second, "the compose Redis to answer with the password", func() error {
		return c.Ping(ctx).Err()
	})
	open := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port})
	defer open.Close()
	if err := open.Set(ctx, "k", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Errorf("a client without the password: %v, want NOAUTH", err)
	}
	health := local.Replace(s.HealthCheck.Test[len(s.HealthCheck.Test)-1])
	if out, err := exec.Command("sh", "-c", health).CombinedOutput(); err != nil {
		t.Errorf("healthcheck %q with the secret: %v %s", health, err, out)
	}
	writeSecret(t, secret, "another")
	var exit *exec.ExitError
	if out, err := exec.Command("sh", "-c", health).CombinedOutput(); !errors.As(err, &exit) {
		t.Errorf("healthcheck with another password: %v %s, want it to fail", err, out)
	}
}

func writeSecret(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
