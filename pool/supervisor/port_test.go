package supervisor_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// portDriver is the Lingma driver whose worker listens on a fixed socket
// port, as the real binary's other listeners do (its profile websocket, its
// IPC pipe): two workers, or a leftover process, may find it taken.
type portDriver struct {
	*lingma.Driver
	port int
}

func (d portDriver) Command(ep worker.Endpoint) []string {
	ep.Port = d.port
	return d.Driver.Command(ep)
}

func (d portDriver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	ep.Port = d.port
	return d.Driver.Connect(ctx, ep)
}

// TestTakenPortIsMarkedFailed runs the bundled simulator as a worker whose
// socket port something else holds: it exits saying the address is in use,
// the same way at each start, so the supervisor marks it failed with that
// reason instead of restarting it forever. Once the port is free, a restart
// brings it up.
func TestTakenPortIsMarkedFailed(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	drv := portDriver{lingma.New(lingma.Config{Command: []string{testenv.PoolgateBin(t), "simworker"},
		ExtraArgs: []string{"--logged-in"}}), port}
	wc := execWorker(t, "w1")
	wc.FailAfter = 3
	wc.Driver = drv
	launcher := &supervisor.ExecLauncher{}
	s := supervisor.New(supervisor.Config{}, []supervisor.WorkerConfig{wc}, launcher, nil, slog.New(slog.DiscardHandler))
	s.Start(context.Background())
	t.Cleanup(func() {
		s.Shutdown()
		launcher.Close()
	})
	testenv.WaitFor(t, 20*time.Second, "failed for the taken port", func() bool {
		st := status(s, "w1")
		return st.State == supervisor.StateFailed && strings.Contains(st.LastError, "address already in use") &&
			strings.Contains(st.LastError, "port or socket it needs is taken")
	})
	n := status(s, "w1").Restarts
	time.Sleep(2 * time.Second)
	if st := status(s, "w1"); st.Restarts != n || st.State != supervisor.StateFailed {
		t.Fatalf("after failing: %s with %d restarts, was %d; want it left failed", st.State, st.Restarts, n)
	}
	taken.Close()
	w, _ := s.Worker("w1")
	w.Restart()
	testenv.WaitFor(t, 20*time.Second, "ready once the port is free", func() bool { return status(s, "w1").State == supervisor.StateReady })
}
