package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/pool/supervisor"
)

// poolCollector reads a pool snapshot at scrape time, instead of keeping
// gauges that every change would have to update, so the instance gauges can
// never drift from /internal/pool.
type poolCollector struct {
	pool     Pool
	states   *prometheus.Desc
	inFlight *prometheus.Desc
}

func newPoolCollector(p Pool) *poolCollector {
	return &poolCollector{
		pool:     p,
		states:   prometheus.NewDesc("poolgate_instances", "Instances by state.", []string{"state"}, nil),
		inFlight: prometheus.NewDesc("poolgate_instance_in_flight", "Turns in flight by instance.", []string{"instance"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.states
	ch <- c.inFlight
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.pool.Snapshot()
	counts := make(map[supervisor.State]int, len(supervisor.States))
	for _, in := range snap.Instances {
		counts[in.State]++
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(in.InFlight), in.Name)
	}
	for _, s := range supervisor.States {
		ch <- prometheus.MustNewConstMetric(c.states, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}
