package deploy_test

import (
	"bufio"
	"context"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
	_ "github.com/poolgate/poolgate/pool/drivers" // the drivers' sections are settings too
)

// repoRoot is the repository root (this file is in deploy/).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

// loadCompose loads docker-compose.yml as docker compose would, with
// .env.example as the project's .env and the given profiles (none: the
// COMPOSE_PROFILES of .env.example). No Docker engine is needed.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	return loadComposeEnv(t, nil, profiles...)
}

// loadComposeEnv is loadCompose with env (KEY=VALUE) set in the shell that
// runs docker compose.
func loadComposeEnv(t *testing.T, env []string, profiles ...string) *types.Project {
	t.Helper()
	root := repoRoot(t)
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithEnv(env),
		cli.WithWorkingDirectory(root),
		cli.WithEnvFiles(filepath.Join(root, ".env.example")),
		cli.WithDotEnv,
		cli.WithDefaultProfiles(profiles...),
		// The services' env_file is the operator's .env, which the
		// repository does not have; its path is checked below.
		cli.WithoutEnvironmentResolution,
	)
	if err != nil {
		t.Fatalf("compose options: %v", err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("load docker-compose.yml: %v", err)
	}
	return p
}

func TestComposeProfiles(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"default", nil, []string{"poolgate", "redis"}},
		{"monitoring", []string{"single", "monitoring"}, []string{"grafana", "jaeger", "poolgate", "prometheus", "redis"}},
		{"scale", []string{"scale"}, []string{"nginx", "poolgate-1", "poolgate-2", "redis"}},
		{"scale+monitoring", []string{"scale", "monitoring"}, []string{"grafana", "jaeger", "nginx", "poolgate-1", "poolgate-2", "prometheus", "redis"}},
		{"scale+sentinel", []string{"scale", "sentinel"}, []string{"nginx", "poolgate-1", "poolgate-2", "redis", "redis-replica",
			"sentinel-1", "sentinel-2", "sentinel-3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := loadCompose(t, tt.give...)
			got := p.ServiceNames()
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("services = %v, want %v", got, tt.want)
			}
			checkRedis(t, p)
			checkBindMounts(t, p)
			checkHostPorts(t, p)
			for _, s := range p.Services {
				if strings.HasPrefix(s.Name, "poolgate") {
					checkGateway(t, p, s)
				}
			}
		})
	}
}

func checkRedis(t *testing.T, p *types.Project) {
	t.Helper()
	r, err := p.GetService("redis")
	if err != nil {
		t.Fatal(err)
	}
	cmd := strings.Join(r.Command, " ")
	if !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis command %q: want --appendonly yes (persistence)", cmd)
	}
	if r.HealthCheck == nil || !strings.Contains(strings.Join(r.HealthCheck.Test, " "), "redis-cli ping") {
		t.Errorf("redis healthcheck = %+v, want redis-cli ping", r.HealthCheck)
	}
	if !hasVolume(r, "/data") {
		t.Errorf("redis has no volume at /data: %+v", r.Volumes)
	}
	checkRedisLocked(t, p)
}

// redisSecret is the secret holding the compose Redis's password, and where
// a container finds it.
const (
	redisSecret     = "redis_password"
	redisSecretFile = "/run/secrets/" + redisSecret
)

// checkRedisLocked: every Redis server of the project (the primary, its
// replica, the sentinels) requires the password of the secret made of
// REDIS_PASSWORD, uses it towards the others and in its healthcheck,
// refuses to start without it, and sits on the Redis network alone with the
// gateway containers; nothing else (monitoring, nginx) can reach it.
func checkRedisLocked(t *testing.T, p *types.Project) {
	t.Helper()
	if sec, ok := p.Secrets[redisSecret]; !ok || sec.Environment != "REDIS_PASSWORD" {
		t.Errorf("secrets = %+v, want %s from REDIS_PASSWORD", p.Secrets, redisSecret)
	}
	if _, ok := readEnvExample(t)["REDIS_PASSWORD"]; !ok {
		t.Error(".env.example does not document REDIS_PASSWORD")
	}
	if n, ok := p.Networks["redis"]; !ok || !n.Internal {
		t.Errorf("networks = %+v, want an internal network redis", p.Networks)
	}
	for _, s := range p.Services {
		_, onRedis := s.Networks["redis"]
		isRedis := strings.HasPrefix(s.Name, "redis") || strings.HasPrefix(s.Name, "sentinel")
		isGateway := strings.HasPrefix(s.Name, "poolgate")
		if onRedis != (isRedis || isGateway) {
			t.Errorf("%s is on the redis network: %v; want only Redis and the gateways there", s.Name, onRedis)
		}
		if !isRedis && !isGateway {
			continue
		}
		if !slices.ContainsFunc(s.Secrets, func(r types.ServiceSecretConfig) bool { return r.Source == redisSecret }) {
			t.Errorf("%s does not mount the %s secret", s.Name, redisSecret)
		}
		if !isRedis {
			continue
		}
		cmd := strings.Join(s.Command, " ")
		wants := []string{redisSecretFile, `[ -n "$pw" ] || {`, "exit 1"}
		if strings.HasPrefix(s.Name, "sentinel") {
			wants = append(wants, `requirepass %s\nsentinel auth-pass poolgate %s\nsentinel sentinel-pass %s\n' "$pw" "$pw" "$pw"`)
		} else {
			wants = append(wants, `exec docker-entrypoint.sh redis-server --requirepass "$pw"`)
		}
		if s.Name == "redis-replica" {
			wants = append(wants, `--masterauth "$pw"`)
		}
		for _, want := range wants {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s command %q lacks %q", s.Name, cmd, want)
			}
		}
		if hc := strings.Join(s.HealthCheck.Test, " "); !strings.Contains(hc, "REDISCLI_AUTH=\"$(cat "+redisSecretFile+")\"") ||
			!strings.Contains(hc, "grep -q PONG") {
			t.Errorf("%s healthcheck %q: want redis-cli with the password, looking for PONG", s.Name, hc)
		}
	}
}

// checkGateway: a poolgate container is built from deploy/Dockerfile, reads
// .env, waits for a healthy Redis, is healthy on /readyz and keeps its work
// dirs on its own volume.
func checkGateway(t *testing.T, p *types.Project, s types.ServiceConfig) {
	t.Helper()
	root := repoRoot(t)
	if s.Build == nil {
		t.Fatalf("%s has no build section", s.Name)
	}
	if df := filepath.Join(s.Build.Context, s.Build.Dockerfile); df != filepath.Join(root, "deploy", "Dockerfile") {
		t.Errorf("%s builds %s, want deploy/Dockerfile", s.Name, df)
	} else if _, err := os.Stat(df); err != nil {
		t.Errorf("%s: %v", s.Name, err)
	}
	if len(s.EnvFiles) != 1 || s.EnvFiles[0].Path != filepath.Join(root, ".env") {
		t.Errorf("%s env_file = %+v, want .env", s.Name, s.EnvFiles)
	}
	if d, ok := s.DependsOn["redis"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("%s depends_on = %+v, want redis healthy", s.Name, s.DependsOn)
	}
	if s.HealthCheck == nil || !strings.Contains(strings.Join(s.HealthCheck.Test, " "), "http://127.0.0.1:8080/readyz") {
		t.Errorf("%s healthcheck = %+v, want /readyz", s.Name, s.HealthCheck)
	}
	if !hasVolume(s, "/data") {
		t.Errorf("%s has no volume at /data", s.Name)
	}
	env := func(k string) string {
		if v := s.Environment[k]; v != nil {
			return *v
		}
		return ""
	}
	tests := []struct{ give, want string }{
		{"POOLGATE_LISTEN", "0.0.0.0:8080"},
		{"POOLGATE_DATA_DIR", "/data"},
		{"POOLGATE_REDIS_URL", "redis://redis:6379/0"},
		{"POOLGATE_REDIS_MODE", "single"},
		{"POOLGATE_REDIS_PASSWORD_FILE", redisSecretFile},
	}
	for _, tt := range tests {
		if got := env(tt.give); got != tt.want {
			t.Errorf("%s %s = %q, want %q", s.Name, tt.give, got, tt.want)
		}
	}
	if s.Name != "poolgate" { // a replica of the scale profile
		if got, want := env("POOLGATE_ADVERTISE_URL"), "http://"+s.Name+":8080"; got != want {
			t.Errorf("%s POOLGATE_ADVERTISE_URL = %q, want %q", s.Name, got, want)
		}
		if _, ok := p.Services["poolgate"]; ok {
			t.Errorf("the single-node poolgate runs beside replica %s: two processes would drive one account", s.Name)
		}
	}
	for _, v := range s.Volumes {
		if v.Target != "/data" {
			continue
		}
		for _, o := range p.Services {
			if o.Name != s.Name && hasVolumeSource(o, v.Source) {
				t.Errorf("%s and %s share the volume %s: each needs its own work dirs", s.Name, o.Name, v.Source)
			}
		}
	}
}

func hasVolume(s types.ServiceConfig, target string) bool {
	return slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Target == target && v.Type == types.VolumeTypeVolume
	})
}

func hasVolumeSource(s types.ServiceConfig, source string) bool {
	return slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Source == source })
}

// checkBindMounts: every file or directory a service mounts from the
// repository exists.
func checkBindMounts(t *testing.T, p *types.Project) {
	t.Helper()
	for _, s := range p.Services {
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", s.Name, v.Source, err)
			}
		}
	}
}

// checkHostPorts: no two services publish the same host port.
func checkHostPorts(t *testing.T, p *types.Project) {
	t.Helper()
	seen := map[string]string{}
	for _, s := range p.Services {
		for _, port := range s.Ports {
			key := port.HostIP + ":" + port.Published
			if other, ok := seen[key]; ok {
				t.Errorf("%s and %s both publish host port %s", s.Name, other, key)
			}
			seen[key] = s.Name
		}
	}
}

func TestComposeScaleProfile(t *testing.T) {
	p := loadCompose(t, "scale")
	ng, err := p.GetService("nginx")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(ng.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == filepath.Join(repoRoot(t), "deploy", "nginx.conf") && v.Target == "/etc/nginx/nginx.conf"
	}) {
		t.Errorf("nginx does not mount deploy/nginx.conf as /etc/nginx/nginx.conf: %+v", ng.Volumes)
	}
	if len(ng.Ports) != 1 || ng.Ports[0].Target != 8080 || ng.Ports[0].Published != "8080" {
		t.Errorf("nginx ports = %+v, want 8080:8080", ng.Ports)
	}
	for _, name := range []string{"poolgate-1", "poolgate-2"} {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Ports) != 0 {
			t.Errorf("replica %s publishes %+v: only nginx should face clients", name, s.Ports)
		}
		if _, ok := ng.DependsOn[name]; !ok {
			t.Errorf("nginx does not depend on %s", name)
		}
	}
}

// The sentinel profile is Redis as Sentinel runs it: the compose Redis as
// the first primary, a replica of it with its own volume, and three
// sentinels that watch it under the name .env.example's sentinel URL uses,
// with a quorum of two; the URL is one redis_mode sentinel accepts.
func TestComposeSentinelProfile(t *testing.T) {
	p := loadCompose(t, "scale", "sentinel")
	rep, err := p.GetService("redis-replica")
	if err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(rep.Command, " "); !strings.Contains(cmd, "--replicaof redis 6379") || !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis-replica command %q: want --replicaof redis 6379 and --appendonly yes", cmd)
	}
	if !hasVolume(rep, "/data") || hasVolumeSource(rep, "redis-data") {
		t.Errorf("redis-replica volumes %+v: want a /data volume of its own", rep.Volumes)
	}
	for _, name := range []string{"sentinel-1", "sentinel-2", "sentinel-3"} {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{`sentinel monitor poolgate redis 6379 2\n`, "port 26379", "--sentinel"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s command %q lacks %q", name, cmd, want)
			}
		}
		if len(s.Ports) != 0 {
			t.Errorf("%s publishes %+v: only the gateway talks to the sentinels", name, s.Ports)
		}
	}
	b, err := os.ReadFile(filepath.Join(repoRoot(t), ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "#   POOLGATE_REDIS_URL: "
	var url string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok && strings.Contains(v, "master_name=poolgate") {
			url = v
		}
	}
	if url == "" {
		t.Fatalf(".env.example shows no sentinel POOLGATE_REDIS_URL for the profile")
	}
	if err := redisconn.Check(redisconn.Config{Mode: redisconn.Sentinel, URL: url}); err != nil {
		t.Errorf(".env.example's sentinel URL: %v", err)
	}
	for _, want := range []string{"sentinel-1:26379", "addr=sentinel-2:26379", "addr=sentinel-3:26379"} {
		if !strings.Contains(url, want) {
			t.Errorf(".env.example's sentinel URL %q lacks %s", url, want)
		}
	}
}

func TestComposeMonitoringProfile(t *testing.T) {
	root := repoRoot(t)
	p := loadCompose(t, "single", "monitoring")
	prom, err := p.GetService("prometheus")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(prom.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == filepath.Join(root, "deploy", "prometheus.yml")
	}) {
		t.Errorf("prometheus does not mount deploy/prometheus.yml: %+v", prom.Volumes)
	}
	if len(prom.Configs) != 1 || prom.Configs[0].Target != promTokenFile {
		t.Errorf("prometheus configs = %+v, want the metrics token at %s", prom.Configs, promTokenFile)
	}
	graf, err := p.GetService("grafana")
	if err != nil {
		t.Fatal(err)
	}
	mounts := map[string]string{}
	for _, v := range graf.Volumes {
		mounts[v.Target] = v.Source
	}
	tests := []struct{ give, want string }{
		{"/etc/grafana/provisioning", filepath.Join(root, "deploy", "grafana", "provisioning")},
		{grafanaDashboardsDir, filepath.Join(root, "deploy", "grafana", "dashboards")},
	}
	for _, tt := range tests {
		if got := mounts[tt.give]; got != tt.want {
			t.Errorf("grafana mounts %q at %s, want %q", got, tt.give, tt.want)
		}
	}
}

// TestComposeTraceBackend: the monitoring profile's Jaeger takes OTLP over
// HTTP on the compose network at the endpoint .env.example tells poolgate
// to export to, publishes only its UI and only on loopback, and Grafana
// has it as a datasource.
func TestComposeTraceBackend(t *testing.T) {
	p := loadCompose(t, "single", "monitoring")
	j, err := p.GetService("jaeger")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := readEnvExample(t)["OTEL_EXPORTER_OTLP_ENDPOINT"].defaultValue
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "http" || u.Hostname() != j.Name || u.Port() != "4318" {
		t.Fatalf(".env.example's OTEL_EXPORTER_OTLP_ENDPOINT=%q, want http://%s:4318 (OTLP over HTTP)", endpoint, j.Name)
	}
	if !slices.Contains(j.Command, "--set=receivers.otlp.protocols.http.endpoint=0.0.0.0:4318") {
		t.Errorf("jaeger command %v: its OTLP/HTTP receiver must listen beyond the container's loopback", j.Command)
	}
	if !slices.Equal(j.Profiles, []string{"monitoring"}) {
		t.Errorf("jaeger profiles %v, want monitoring only", j.Profiles)
	}
	if len(j.Ports) != 1 || j.Ports[0].Target != 16686 || j.Ports[0].HostIP != "127.0.0.1" {
		t.Errorf("jaeger ports %+v, want the UI (16686) on 127.0.0.1 only", j.Ports)
	}
	var ds struct {
		Datasources []struct{ Type, UID, URL string } `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(repoRoot(t), "deploy", "grafana", "provisioning", "datasources", "jaeger.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "jaeger" || ds.Datasources[0].URL != "http://"+j.Name+":16686" {
		t.Errorf("grafana's jaeger datasource %+v, want http://%s:16686", ds.Datasources, j.Name)
	}
	// With the endpoint set, every gateway container exports there.
	for _, s := range loadComposeEnv(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint}, "scale", "monitoring").Services {
		if strings.HasPrefix(s.Name, "poolgate") {
			if v := s.Environment["OTEL_EXPORTER_OTLP_ENDPOINT"]; v == nil || *v != endpoint {
				t.Errorf("%s exports traces to %v, want %s", s.Name, v, endpoint)
			}
		}
	}
}

// TestEnvExampleDocumentsEverySetting: every variable the daemon reads is
// in .env.example with a comment above it, and every commented-out value
// is the real default.
func TestEnvExampleDocumentsEverySetting(t *testing.T) {
	vars := readEnvExample(t)
	keys := config.Keys()
	for _, k := range keys {
		name := config.EnvName(k)
		v, ok := vars[name]
		if !ok {
			t.Errorf(".env.example does not document %s (config key %q): add it with a comment", name, k)
			continue
		}
		if !v.commented {
			t.Errorf(".env.example: %s has no comment line above it", name)
		}
	}
	known := map[string]bool{}
	for _, k := range append(keys, pendingKeys...) {
		known[config.EnvName(k)] = true
	}
	for name := range vars {
		if strings.HasPrefix(name, "POOLGATE_") && !known[name] {
			t.Errorf(".env.example documents %s, which poolgate does not read (a typo?)", name)
		}
	}
	checkDocumentedDefaults(t, vars)
}

// pendingKeys are settings the issues in flight add; .env.example documents
// them already. Remove a key once config.Keys() has it.
var pendingKeys = []string{"bundle_key"}

// containerDefaults are the keys whose value in .env.example is what the
// image sets, not the daemon's own default.
var containerDefaults = map[string]bool{"data_dir": true}

func checkDocumentedDefaults(t *testing.T, vars map[string]envVar) {
	t.Helper()
	def := config.Defaults()
	for _, k := range config.Keys() {
		v, ok := vars[config.EnvName(k)]
		if !ok || v.defaultValue == "" || containerDefaults[k] {
			continue
		}
		got, _, err := config.Load("", []string{config.EnvName(k) + "=" + v.defaultValue})
		if err != nil {
			t.Errorf(".env.example: %s=%s does not load: %v", config.EnvName(k), v.defaultValue, err)
			continue
		}
		if a, b := fieldByKey(got, k), fieldByKey(def, k); !reflect.DeepEqual(a, b) {
			t.Errorf(".env.example shows %s=%s as the default, but the default is %v", config.EnvName(k), v.defaultValue, b)
		}
	}
}

func fieldByKey(c config.Config, key string) any {
	v := reflect.ValueOf(c)
	for name := range strings.SplitSeq(key, ".") { // a section's key is SECTION.KEY
		found := false
		for i := range v.NumField() {
			if v.Type().Field(i).Tag.Get("yaml") == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return nil
		}
	}
	return v.Interface()
}

type envVar struct {
	commented    bool   // a comment line is right above its first mention
	defaultValue string // the value of its last commented-out line
}

var envLine = regexp.MustCompile(`^(#\s*)?([A-Z][A-Z0-9_]*)=(.*)$`)

// readEnvExample finds every NAME=value line, set or commented out.
func readEnvExample(t *testing.T) map[string]envVar {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), ".env.example"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]envVar{}
	prevComment := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		m := envLine.FindStringSubmatch(line)
		if m == nil {
			prevComment = strings.HasPrefix(line, "#") && len(line) > 1
			continue
		}
		v, seen := vars[m[2]]
		if !seen {
			v.commented = prevComment
		}
		if m[1] != "" {
			v.defaultValue = m[3]
		}
		vars[m[2]] = v
		prevComment = true // a commented-out example documents the next line too
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return vars
}

// TestDockerfile checks what a build would show, without an engine: two
// stages, a static binary, a non-root user, the healthcheck on /readyz.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var from []string
	ins := map[string][]string{}
	for _, in := range dockerInstructions(string(b)) {
		op, arg, _ := strings.Cut(in, " ")
		op = strings.ToUpper(op)
		ins[op] = append(ins[op], arg)
		if op == "FROM" {
			from = append(from, strings.Fields(arg)[0])
		}
	}
	if len(from) != 2 || !strings.HasPrefix(from[0], "golang:") || from[1] != "debian:bookworm-slim" {
		t.Errorf("FROM = %v, want a golang builder and debian:bookworm-slim", from)
	}
	last := func(op string) string {
		if v := ins[op]; len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	if u := last("USER"); u == "" || strings.HasPrefix(u, "root") || strings.HasPrefix(u, "0") {
		t.Errorf("USER = %q, want a non-root user", u)
	}
	if h := last("HEALTHCHECK"); !strings.Contains(h, "/readyz") {
		t.Errorf("HEALTHCHECK = %q, want a check of /readyz", h)
	}
	if e := last("ENTRYPOINT"); !strings.Contains(e, `"tini"`) || !strings.Contains(e, `"poolgate"`) {
		t.Errorf("ENTRYPOINT = %q, want tini running poolgate", e)
	}
	run := strings.Join(ins["RUN"], "\n") + strings.Join(ins["ENV"], "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags="-s -w"`, "./cmd/poolgate", "chromium", "tini"} {
		if !strings.Contains(run, want) {
			t.Errorf("the Dockerfile's RUN/ENV lines lack %q", want)
		}
	}
	if !slices.Contains(ins["EXPOSE"], "8080") {
		t.Errorf("EXPOSE = %v, want 8080", ins["EXPOSE"])
	}
}

// dockerInstructions joins continuation lines and drops comments.
func dockerInstructions(src string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		out = append(out, cur.String())
		cur.Reset()
	}
	return out
}

// The YAML example loads as it stands, its secrets taken from the
// environment and files it names.
func TestYAMLExampleLoads(t *testing.T) {
	path, env := testenv.ExampleConfig(t)
	cfg, warnings, err := config.Load(path, env)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("the example does not load: %v %v", err, warnings)
	}
	if len(cfg.APIKeys) != 5 || cfg.APIKeys[0].Name != "alice" || cfg.APIKeys[0].Key != "sk-alice" || cfg.APIKeys[0].RPM != 60 ||
		cfg.APIKeys[1].Key != "sk-bob" || cfg.APIKeys[2].Concurrency != 1 || cfg.APIKeys[3].Role != "viewer" ||
		cfg.APIKeys[4].Key != "sk-ops" || cfg.APIKeys[4].Role != "admin" {
		t.Errorf("keys %+v", cfg.APIKeys)
	}
	if len(cfg.Accounts) != 2 || cfg.Accounts[0].Password != "pw1" || cfg.Accounts[1].Password != "pw2" {
		t.Errorf("accounts %+v", cfg.Accounts)
	}
}
