// Package metrics defines every Prometheus metric poolgate exports. The
// daemon's wiring makes the registry and calls New once; packages receive
// *Metrics (a nil *Metrics records nothing, so unit tests may pass nil).
// The per-API series are added for each protocol of the protocols table
// (AddAPI, from the edge), so this package names no protocol.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics holds the collectors. Fields are exported for the packages that
// record them; the names are a contract with dashboards and alerts.
type Metrics struct {
	Requests         *prometheus.CounterVec   // poolgate_requests_total{api,code}
	RequestDuration  *prometheus.HistogramVec // poolgate_request_duration_seconds{api}
	TTFT             *prometheus.HistogramVec // poolgate_time_to_first_token_seconds{api}
	Tokens           *prometheus.CounterVec   // poolgate_tokens_total{direction}
	InFlight         prometheus.Gauge         // poolgate_in_flight
	QueueDepth       prometheus.Gauge         // poolgate_queue_depth
	QueueWait        prometheus.Histogram     // poolgate_queue_wait_seconds
	Rejections       prometheus.Counter       // poolgate_backpressure_rejections_total
	Retries          prometheus.Counter       // poolgate_retries_total
	Cooldowns        prometheus.Counter       // poolgate_cooldowns_total
	Restarts         *prometheus.CounterVec   // poolgate_instance_restarts_total{instance}
	CacheHits        prometheus.Counter       // poolgate_session_cache_hits_total
	CacheMisses      prometheus.Counter       // poolgate_session_cache_misses_total
	CacheInvalidated prometheus.Counter       // poolgate_session_cache_invalidations_total
	StoreErrors      *prometheus.CounterVec   // poolgate_store_errors_total{op}
	LoginAttempts    *prometheus.CounterVec   // poolgate_login_attempts_total{result}
	LoginDuration    prometheus.Histogram     // poolgate_login_duration_seconds
	FieldsIgnored    *prometheus.CounterVec   // poolgate_request_fields_ignored_total{protocol,field}
	ToolsWithheld    *prometheus.CounterVec   // poolgate_tools_withheld_total{reason}
	Handovers        *prometheus.CounterVec   // poolgate_cluster_handovers_total{account}
	KeyRequests      *prometheus.CounterVec   // poolgate_key_requests_total{key,code}
	KeyTokens        *prometheus.CounterVec   // poolgate_key_tokens_total{key,direction}
	KeyLimited       *prometheus.CounterVec   // poolgate_key_limited_total{key,limit}
	ConnsEvicted     prometheus.Counter       // poolgate_unauthenticated_conns_closed_total
	ConnsRefused     prometheus.Counter       // poolgate_key_conns_refused_total
	ConnsOpen        prometheus.Gauge         // poolgate_client_conns
	BodyBytes        prometheus.Gauge         // poolgate_request_body_bytes

	// AccountingHeld and AccountingDropped are the accounting records
	// (usage, request log, key limits) that wait to be written to Redis
	// again, and those given up.
	AccountingHeld    *prometheus.GaugeVec   // poolgate_accounting_held{store}
	AccountingDropped *prometheus.CounterVec // poolgate_accounting_dropped_total{store}
	// RedisUp says whether this replica's last Redis call succeeded;
	// AffinityHeld counts the affinity entries put while Redis was away,
	// waiting to be written back.
	RedisUp      prometheus.Gauge // poolgate_redis_up
	AffinityHeld prometheus.Gauge // poolgate_affinity_held
	// FollowUps counts the follow-up turns each account served (requests
	// that continue a conversation), FollowUpsReused those that continued
	// their upstream session: their ratio is the reuse the routing gets.
	FollowUps       *prometheus.CounterVec // poolgate_follow_ups_total{account}
	FollowUpsReused *prometheus.CounterVec // poolgate_follow_ups_reused_total{account}

	// The series every request touches, looked up once here so that a
	// request pays no label hashing for them.
	apis                map[string]*API
	inputTok, outputTok prometheus.Counter
}

// API holds one public API's series of the per-request metrics.
type API struct {
	// OK is poolgate_requests_total{api, code="200"}.
	OK prometheus.Counter
	// Duration is poolgate_request_duration_seconds{api}.
	Duration prometheus.Observer
	// TTFT is poolgate_time_to_first_token_seconds{api}.
	TTFT prometheus.Observer
}

// KeyLimits are the limit label values of KeyLimited.
var KeyLimits = []string{"rpm", "concurrency", "tokens_per_day"}

// ToolWithheldReasons are the reason label values of ToolsWithheld.
var ToolWithheldReasons = []string{"allowlist", "forwarding_off"}

// StoreOps are the store operation label values, pre-initialised.
var StoreOps = []string{"take_affinity", "put_affinity", "flush_affinity", "save_response", "load_response", "delete_response", "save_bundle", "load_bundle",
	"record_usage", "log_request", "key_limits"}

// AccountingStores are the store label values of AccountingHeld and
// AccountingDropped.
var AccountingStores = []string{"usage", "request_log", "key_limits"}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) *Metrics {
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}
	c := collectors{reg}
	m := &Metrics{
		Requests:        c.counterVec("poolgate_requests_total", "API requests by api and HTTP status code.", "api", "code"),
		RequestDuration: c.histogramVec("poolgate_request_duration_seconds", "Whole request duration.", latency, "api"),
		TTFT:            c.histogramVec("poolgate_time_to_first_token_seconds", "Time to the first answer event.", latency, "api"),
		Tokens:          c.counterVec("poolgate_tokens_total", "Tokens by direction (input, output).", "direction"),
		InFlight:        c.gauge("poolgate_in_flight", "Requests holding a worker slot."),
		QueueDepth:      c.gauge("poolgate_queue_depth", "Requests waiting for a worker slot."),
		QueueWait:       c.histogram("poolgate_queue_wait_seconds", "Time spent waiting for a worker slot.", latency),
		Rejections:      c.counter("poolgate_backpressure_rejections_total", "Requests rejected with 429 by admission control."),
		Retries:         c.counter("poolgate_retries_total", "Turns retried on another instance."),
		Cooldowns:       c.counter("poolgate_cooldowns_total", "Instances put into cooldown after an upstream rate limit."),
		Restarts:        c.counterVec("poolgate_instance_restarts_total", "Worker process restarts by instance.", "instance"),
		CacheHits:       c.counter("poolgate_session_cache_hits_total", "Requests that reused an upstream session."),
		CacheMisses:     c.counter("poolgate_session_cache_misses_total", "Follow-up requests that found no reusable session."),
		CacheInvalidated: c.counter("poolgate_session_cache_invalidations_total",
			"Affinity entries dropped after a failure or a gone instance."),
		StoreErrors:   c.counterVec("poolgate_store_errors_total", "Failed session store operations by op.", "op"),
		LoginAttempts: c.counterVec("poolgate_login_attempts_total", "Automatic login attempts by result.", "result"),
		LoginDuration: c.histogram("poolgate_login_duration_seconds",
			"Automatic login duration.", []float64{1, 2, 5, 10, 20, 30, 60, 120, 300}),
		FieldsIgnored: c.counterVec("poolgate_request_fields_ignored_total",
			"Requests that carried a field the workers cannot honour, which was dropped, by protocol and field.", "protocol", "field"),
		ToolsWithheld: c.counterVec("poolgate_tools_withheld_total",
			"Tools a request offered that the tool policy kept from the workers, by reason (allowlist, forwarding_off).", "reason"),
		Handovers: c.counterVec("poolgate_cluster_handovers_total",
			"Accounts this replica handed over to another replica (drain, stop, release), by account.", "account"),
		KeyRequests: c.counterVec("poolgate_key_requests_total",
			"API requests by API key name (configured names only) and HTTP status code.", "key", "code"),
		KeyTokens: c.counterVec("poolgate_key_tokens_total",
			"Tokens by API key name (configured names only) and direction (input, output).", "key", "direction"),
		KeyLimited: c.counterVec("poolgate_key_limited_total",
			"Requests refused with 429 by an API key's own limit, by key name and limit.", "key", "limit"),
		AccountingHeld: c.gaugeVec("poolgate_accounting_held",
			"Accounting records held in memory to be written to Redis again, by store (usage, request_log, key_limits).", "store"),
		AccountingDropped: c.counterVec("poolgate_accounting_dropped_total",
			"Accounting records given up (a full queue, past the bound of held records, or held at shutdown), by store.", "store"),
		RedisUp: c.gauge("poolgate_redis_up",
			"1 while this replica's Redis calls succeed, 0 while Redis is marked down (and without Redis)."),
		AffinityHeld: c.gauge("poolgate_affinity_held",
			"Affinity entries put while Redis was away, kept in process until they are written back."),
		FollowUps: c.counterVec("poolgate_follow_ups_total",
			"Follow-up turns (requests that continue a conversation) served, by account.", "account"),
		FollowUpsReused: c.counterVec("poolgate_follow_ups_reused_total",
			"Follow-up turns served that continued their upstream session, by account.", "account"),
		ConnsEvicted: c.counter("poolgate_unauthenticated_conns_closed_total",
			"Connections closed because more than max_unauthenticated_conns were open without a credential (the oldest goes)."),
		ConnsRefused: c.counter("poolgate_key_conns_refused_total",
			"Requests refused (429, connection closed) because their API key held max_conns_per_key connections already."),
		ConnsOpen: c.gauge("poolgate_client_conns",
			"Client connections open now on the API and admin listeners, against max_conns."),
		BodyBytes: c.gauge("poolgate_request_body_bytes",
			"Bytes of API request bodies held now, against body_budget_bytes."),
	}
	for _, r := range ToolWithheldReasons {
		m.ToolsWithheld.WithLabelValues(r)
	}
	m.apis = map[string]*API{}
	m.inputTok, m.outputTok = m.Tokens.WithLabelValues("input"), m.Tokens.WithLabelValues("output")
	for _, op := range StoreOps {
		m.StoreErrors.WithLabelValues(op)
	}
	for _, s := range AccountingStores {
		m.AccountingHeld.WithLabelValues(s)
		m.AccountingDropped.WithLabelValues(s)
	}
	for _, r := range []string{"success", "failure"} {
		m.LoginAttempts.WithLabelValues(r)
	}
	return m
}

func (m *Metrics) newAPI(api string) *API {
	return &API{OK: m.Requests.WithLabelValues(api, "200"), Duration: m.RequestDuration.WithLabelValues(api),
		TTFT: m.TTFT.WithLabelValues(api)}
}

// AddAPI adds the answer API api (a protocol's name, the api label): its
// per-request series, looked up once here, and the series of the fields
// its decoder may drop. The edge adds each protocol of its table before it
// serves.
func (m *Metrics) AddAPI(api string, dropped []string) {
	if m == nil {
		return
	}
	m.apis[api] = m.newAPI(api)
	for _, f := range dropped {
		m.FieldsIgnored.WithLabelValues(api, f)
	}
}

// ForAPI returns api's series: those of an added API were looked up by
// AddAPI, any other's are looked up now.
func (m *Metrics) ForAPI(api string) *API {
	if a, ok := m.apis[api]; ok {
		return a
	}
	return m.newAPI(api)
}

// CountTokens adds a turn's input and output tokens.
func (m *Metrics) CountTokens(input, output int) {
	m.inputTok.Add(float64(input))
	m.outputTok.Add(float64(output))
}

// InitKeys pre-initialises the per-key series of the configured key names
// and drops those of names no longer configured, so the series stay bounded
// by the configuration (a reload calls it again).
func (m *Metrics) InitKeys(names []string) {
	if m == nil {
		return
	}
	keep := make(map[string]bool, len(names))
	for _, n := range names {
		keep[n] = true
		m.KeyRequests.WithLabelValues(n, "200")
		for _, d := range []string{"input", "output"} {
			m.KeyTokens.WithLabelValues(n, d)
		}
		for _, l := range KeyLimits {
			m.KeyLimited.WithLabelValues(n, l)
		}
	}
	for _, vec := range []*prometheus.CounterVec{m.KeyRequests, m.KeyTokens, m.KeyLimited} {
		for _, name := range labelValues(vec, "key") {
			if !keep[name] {
				vec.DeletePartialMatch(prometheus.Labels{"key": name})
			}
		}
	}
}

// labelValues lists the values label takes in vec's series.
func labelValues(vec *prometheus.CounterVec, label string) []string {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	seen := map[string]bool{}
	var out []string
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		for _, lp := range pb.GetLabel() {
			if lp.GetName() == label && !seen[lp.GetValue()] {
				seen[lp.GetValue()] = true
				out = append(out, lp.GetValue())
			}
		}
	}
	return out
}

// CountFieldIgnored counts one dropped field (nil-safe).
func (m *Metrics) CountFieldIgnored(protocol, field string) {
	if m != nil {
		m.FieldsIgnored.WithLabelValues(protocol, field).Inc()
	}
}

// collectors make collectors registered on reg.
type collectors struct{ reg prometheus.Registerer }

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	reg.MustRegister(c)
	return c
}

func (c collectors) counter(name, help string) prometheus.Counter {
	return register(c.reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

func (c collectors) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(c.reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

func (c collectors) gauge(name, help string) prometheus.Gauge {
	return register(c.reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

func (c collectors) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(c.reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

func (c collectors) histogram(name, help string, buckets []float64) prometheus.Histogram {
	return register(c.reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

func (c collectors) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(c.reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}
