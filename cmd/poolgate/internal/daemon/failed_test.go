package daemon

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// healthz is /healthz as a caller with token sees it.
type healthz struct {
	OK        bool   `json:"ok"`
	Reason    string `json:"reason"`
	Instances []struct {
		Name      string `json:"name"`
		State     string `json:"state"`
		LastError string `json:"last_error"`
	} `json:"instances"`
}

// TestWorkerThatCannotStartIsMarkedFailed: a worker binary that stops being
// executable fails every start the same way; after five its instance is
// failed, with the reason, in /internal/pool and /healthz (ok false), and
// it is started no more. Once the binary is fixed, a restart from the admin
// API brings it back.
func TestWorkerThatCannotStartIsMarkedFailed(t *testing.T) {
	worker := filepath.Join(t.TempDir(), "lingma")
	script := "#!/bin/sh\nexec " + testenv.PoolgateBin(t) + " simworker \"$@\"\n"
	if err := os.WriteFile(worker, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartDaemon(t, "POOLGATE_WORKER_BIN="+worker, `POOLGATE_ACCOUNTS=[{"name":"acct-1"}]`,
		"POOLGATE_WORKER_ARGS=--logged-in", "POOLGATE_ADMIN_TOKEN=adm", "POOLGATE_HEALTH_INTERVAL=200ms", "POOLGATE_BACKOFF_MAX=1s")
	ready := func() bool { return poolInstance(t, d, "acct-1").State == supervisor.StateReady }
	testenv.WaitFor(t, 20*time.Second, "acct-1 ready", ready)
	if err := os.Chmod(worker, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(poolInstance(t, d, "acct-1").PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var in route.InstanceStatus
	testenv.WaitFor(t, 30*time.Second, "acct-1 failed", func() bool {
		in = poolInstance(t, d, "acct-1")
		return in.State == supervisor.StateFailed
	})
	if !strings.Contains(in.LastError, "permission denied") {
		t.Errorf("last_error %q, want the reason: permission denied", in.LastError)
	}
	var h healthz
	if code := d.GetJSON(t, "/healthz", "adm", &h); code != http.StatusOK || h.OK || !strings.Contains(h.Reason, "failed=1") ||
		len(h.Instances) != 1 || !strings.Contains(h.Instances[0].LastError, "permission denied") {
		t.Errorf("/healthz %d %+v, want 200, ok false, the failure counted and explained", code, h)
	}
	restarts := poolInstance(t, d, "acct-1").Restarts
	time.Sleep(2 * time.Second) // two backoff caps
	if got := poolInstance(t, d, "acct-1"); got.Restarts != restarts || got.State != supervisor.StateFailed {
		t.Errorf("after failing: %s with %d restarts, was %d; want it left failed", got.State, got.Restarts, restarts)
	}
	if err := os.Chmod(worker, 0o755); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/internal/pool/acct-1/restart", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	testenv.WaitFor(t, 20*time.Second, "acct-1 ready again", ready)
	var after healthz
	if code := d.GetJSON(t, "/healthz", "", &after); code != http.StatusOK || !after.OK || after.Reason != "" {
		t.Errorf("/healthz after the restart: %d %+v, want ok", code, after)
	}
}

// poolInstance is the named instance in /internal/pool.
func poolInstance(t *testing.T, d *daemontest.Daemon, name string) route.InstanceStatus {
	t.Helper()
	in, ok := poolState(t, d, "adm").Instance(name)
	if !ok {
		t.Fatalf("no instance %s in /internal/pool", name)
	}
	return in
}

// TestMissingWorkerBinRefusesTheStart: the daemon does not start on a
// worker_bin that is not there (issue 35: it used to start and restart
// every worker forever, /healthz answering 200).
func TestMissingWorkerBinRefusesTheStart(t *testing.T) {
	env := []string{"POOLGATE_LISTEN=127.0.0.1:0", "POOLGATE_DATA_DIR=" + t.TempDir(), "POOLGATE_WORKER_BIN=/nonexistent/Lingma",
		`POOLGATE_ACCOUNTS=[{"name":"a"}]`}
	err := serve(context.Background(), Options{}, func() []string { return env }, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "no such file") || !strings.Contains(err.Error(), "POOLGATE_WORKER_BIN") {
		t.Errorf("run = %v, want a refusal naming POOLGATE_WORKER_BIN and the missing file", err)
	}
}
