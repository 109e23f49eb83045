package cluster

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// The cluster's tests run it over the real supervisor and admission room,
// whose workers are fakes (supervisortest).

// readyPool runs ready fake workers under the supervisor and a pool over
// them until the test ends.
func readyPool(t *testing.T, names ...string) (*route.Pool, *supervisor.Supervisor) {
	t.Helper()
	f := supervisortest.New()
	p := route.New(route.Config{}, nil, slog.New(slog.DiscardHandler))
	sup := supervisor.New(p.Watch(supervisor.Config{}), supervisortest.Drive(f, supervisortest.Configs(t, false, names...)), f, nil, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	t.Cleanup(func() {
		p.Shutdown(context.Background())
		cancel()
		sup.Shutdown()
	})
	testenv.WaitFor(t, 5*time.Second, "ready instances", func() bool {
		for _, n := range names {
			if !p.Serves(n) {
				return false
			}
		}
		return true
	})
	return p, sup
}

// counter reads one sample of a counter vector.
func counter(t *testing.T, v *prometheus.CounterVec, label string) float64 {
	t.Helper()
	var pb dto.Metric
	if err := v.WithLabelValues(label).Write(&pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetCounter().GetValue()
}

func newMetrics() *metrics.Metrics { return metrics.New(prometheus.NewRegistry()) }
