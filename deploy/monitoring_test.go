package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/poolgate/poolgate/internal/metrics"
)

const (
	promTokenFile        = "/etc/prometheus/metrics_token"
	grafanaDashboardsDir = "/etc/grafana/dashboards"
	datasourceUID        = "poolgate-prometheus"
)

// collectorMetrics are the series of admin's scrape-time pool collector.
var collectorMetrics = []string{"poolgate_instances", "poolgate_instance_in_flight"}

// exportedMetrics lists every metric name poolgate registers: the ones of
// metrics.New (read from their descriptors, so a vector with no series yet
// counts too) and the pool collector's.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	metrics.New(rec)
	names := map[string]bool{}
	for _, n := range append(rec.names, collectorMetrics...) {
		names[n] = true
	}
	if len(names) < 10 {
		t.Fatalf("found only %d exported metrics: %v", len(names), names)
	}
	return names
}

// recorder is a Registerer that notes the name of every metric registered.
type recorder struct {
	prometheus.Registerer
	names []string
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names = append(r.names, m[1])
		}
	}
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// grafanaDashboard is the part of a dashboard JSON the tests read.
type grafanaDashboard struct {
	UID    string         `json:"uid"`
	Panels []grafanaPanel `json:"panels"`
	Templ  struct {
		List []struct {
			Datasource grafanaDS `json:"datasource"`
			Definition string    `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title      string    `json:"title"`
	Type       string    `json:"type"`
	Datasource grafanaDS `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type grafanaDS struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "dashboards", "poolgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("poolgate.json: %v", err)
	}
	return d
}

var (
	metricRef  = regexp.MustCompile(`poolgate_[a-z_]+`)
	histSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// TestGrafanaDashboardQueriesExportedMetrics: every metric a panel or a
// variable queries is one poolgate exports, and the dashboard covers the
// operator's questions.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	d := loadDashboard(t)
	var queries []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		if p.Datasource.UID != datasourceUID {
			t.Errorf("panel %q uses datasource %q, want %q", p.Title, p.Datasource.UID, datasourceUID)
		}
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range d.Templ.List {
		queries = append(queries, v.Definition)
	}
	used := map[string]bool{}
	for _, q := range queries {
		for _, ref := range metricRef.FindAllString(q, -1) {
			name := ref
			if !exported[name] {
				name = histSuffix.ReplaceAllString(ref, "")
			}
			if !exported[name] {
				t.Errorf("a query names %s, which poolgate does not export: %s", ref, q)
			}
			used[name] = true
		}
	}
	// The panels the deployment promises (issue 7).
	for _, want := range []string{
		"poolgate_requests_total", "poolgate_request_duration_seconds", "poolgate_time_to_first_token_seconds",
		"poolgate_in_flight", "poolgate_queue_depth", "poolgate_backpressure_rejections_total",
		"poolgate_instances", "poolgate_instance_in_flight", "poolgate_instance_restarts_total",
		"poolgate_cooldowns_total", "poolgate_session_cache_hits_total", "poolgate_tokens_total",
		"poolgate_store_errors_total", "poolgate_login_attempts_total",
		// Per key, per account and the cluster.
		"poolgate_key_requests_total", "poolgate_key_tokens_total", "poolgate_key_limited_total",
		"poolgate_cluster_handovers_total",
	} {
		if !used[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
	var unused []string
	for n := range exported {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Logf("exported but on no panel: %v", unused)
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	root := repoRoot(t)
	var ds struct {
		Datasources []struct {
			Name, Type, UID, URL string
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != datasourceUID || ds.Datasources[0].Type != "prometheus" ||
		ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources = %+v, want one prometheus at http://prometheus:9090 with uid %s", ds.Datasources, datasourceUID)
	}
	var prov struct {
		Providers []struct {
			Type    string `yaml:"type"`
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "poolgate.yml"), &prov)
	if len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path != grafanaDashboardsDir {
		t.Errorf("dashboard providers = %+v, want one file provider reading %s", prov.Providers, grafanaDashboardsDir)
	}
}

type scrapeConfig struct {
	JobName       string `yaml:"job_name"`
	MetricsPath   string `yaml:"metrics_path"`
	Authorization struct {
		Type            string `yaml:"type"`
		CredentialsFile string `yaml:"credentials_file"`
	} `yaml:"authorization"`
	MetricRelabel []relabelConfig `yaml:"metric_relabel_configs"`
	StaticConfigs []struct {
		Targets []string `yaml:"targets"`
	} `yaml:"static_configs"`
}

type relabelConfig struct {
	TargetLabel string `yaml:"target_label"`
}

// TestPrometheusConfig: the scrape config parses, scrapes poolgate's
// /metrics with the token file compose provides, and renames poolgate's own
// instance label.
func TestPrometheusConfig(t *testing.T) {
	var cfg struct {
		ScrapeConfigs []scrapeConfig `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(repoRoot(t), "deploy", "prometheus.yml"), &cfg)
	i := slices.IndexFunc(cfg.ScrapeConfigs, func(s scrapeConfig) bool { return s.JobName == "poolgate" })
	if i < 0 {
		t.Fatalf("prometheus.yml has no poolgate job: %+v", cfg.ScrapeConfigs)
	}
	job := cfg.ScrapeConfigs[i]
	if job.MetricsPath != "/metrics" || job.Authorization.Type != "Bearer" || job.Authorization.CredentialsFile != promTokenFile {
		t.Errorf("poolgate job = %+v, want /metrics with a Bearer token from %s", job, promTokenFile)
	}
	var targets []string
	for _, sc := range job.StaticConfigs {
		targets = append(targets, sc.Targets...)
	}
	for _, want := range []string{"poolgate:8080", "poolgate-1:8080", "poolgate-2:8080"} {
		if !slices.Contains(targets, want) {
			t.Errorf("targets %v lack %s", targets, want)
		}
	}
	if !slices.ContainsFunc(job.MetricRelabel, func(r relabelConfig) bool { return r.TargetLabel == "pool_instance" }) {
		t.Errorf("prometheus.yml does not rename poolgate's instance label to pool_instance")
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
