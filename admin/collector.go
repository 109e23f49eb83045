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
	info     *prometheus.Desc
}

func newPoolCollector(p Pool) *poolCollector {
	return &poolCollector{
		pool:     p,
		states:   prometheus.NewDesc("poolgate_instances", "Instances by state.", []string{"state"}, nil),
		inFlight: prometheus.NewDesc("poolgate_instance_in_flight", "Turns in flight by instance.", []string{"instance"}, nil),
		// The kind is an info series of its own, one per instance, not
		// a label on the others: joined in a query when wanted
		// (* on(instance) group_left(driver)), it multiplies no series.
		info: prometheus.NewDesc("poolgate_instance_info", "1 per instance, naming its account and its kind of worker (driver).",
			[]string{"instance", "account", "driver"}, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.states
	ch <- c.inFlight
	ch <- c.info
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.pool.Snapshot()
	counts := make(map[supervisor.State]int, len(supervisor.States))
	for _, in := range snap.Instances {
		counts[in.State]++
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(in.InFlight), in.Name)
		ch <- prometheus.MustNewConstMetric(c.info, prometheus.GaugeValue, 1, in.Name, in.Account, in.Driver)
	}
	for _, s := range supervisor.States {
		ch <- prometheus.MustNewConstMetric(c.states, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
}
