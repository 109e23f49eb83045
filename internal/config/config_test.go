package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// sim lets a test that is not about the simulated pool configure keys or
// accounts without a worker binary.
const sim = "POOLGATE_SIMULATE=true"

func TestLoadEnvOverridesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:9000\nmax_queue: 5\napi_keys: [a, b]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, warnings, err := Load(path, []string{"POOLGATE_MAX_QUEUE=7", "POOLGATE_QUEUE_TIMEOUT=2s", "HOME=/x", sim})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %v, want none", warnings)
	}
	if cfg.Listen != "127.0.0.1:9000" || cfg.MaxQueue != 7 || cfg.QueueTimeout != 2*time.Second ||
		!slices.Equal(cfg.APIKeys.Secrets(), []string{"a", "b"}) {
		t.Errorf("got %+v", cfg)
	}
}

// clustered is a replica's configuration but for its advertise_url.
var clustered = []string{"POOLGATE_REDIS_URL=redis://r:6379", "POOLGATE_CLUSTER_TOKEN=t", "POOLGATE_API_KEYS=k", sim}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  []string
		want string
	}{
		{"unknown yaml key", "lisen: x\n", nil, "lisen"},
		{"bad duration", "", []string{"POOLGATE_QUEUE_TIMEOUT=soon"}, "POOLGATE_QUEUE_TIMEOUT"},
		{"bad int", "", []string{"POOLGATE_MAX_QUEUE=many"}, "POOLGATE_MAX_QUEUE"},
		{"public without keys", "", []string{"POOLGATE_LISTEN=0.0.0.0:8080"}, "POOLGATE_API_KEYS"},
		{"public admin listener without credentials", "", []string{"POOLGATE_LISTEN=127.0.0.1:8080", "POOLGATE_ADMIN_LISTEN=0.0.0.0:9090"}, "POOLGATE_ADMIN_TOKEN"},
		{"insecure does not open the admin API", "", []string{"POOLGATE_LISTEN=0.0.0.0:8080", "POOLGATE_INSECURE=true"}, "admin API"},
		{"insecure does not open a separate admin listener", "", []string{"POOLGATE_LISTEN=0.0.0.0:8080", "POOLGATE_INSECURE=true", "POOLGATE_ADMIN_LISTEN=[::]:9090"}, "admin API"},
		{"bad accounts json", "", []string{`POOLGATE_ACCOUNTS=[{"nam":"x"}]`}, "POOLGATE_ACCOUNTS"},
		{"duplicate account", "", []string{`POOLGATE_ACCOUNTS=[{"name":"x"},{"name":"x"}]`}, "used twice"},
		{"path in account name", "", []string{`POOLGATE_ACCOUNTS=[{"name":"../x"}]`}, "account name"},
		{"zero queue", "", []string{"POOLGATE_MAX_QUEUE=0"}, "max_queue"},
		{"zero tool settle", "", []string{"POOLGATE_LINGMA_TOOL_SETTLE=0"}, "lingma.tool_settle"},
		{"negative tool settle", "lingma_tool_settle: -1s\n", nil, "lingma.tool_settle"},
		{"unknown ask mode", "", []string{"POOLGATE_LINGMA_ASK_MODE=free"}, "lingma.ask_mode"},
		{"tiny transcripts", "", []string{"POOLGATE_LINGMA_RECORD_BYTES=10"}, "lingma.record_bytes"},
		{"no transcripts kept", "lingma:\n  record_keep: 0\n", nil, "lingma.record_keep"},
		{"unknown reuse policy", "", []string{"POOLGATE_LINGMA_REUSE=always"}, "lingma.reuse"},
		{"unknown chat context", "lingma:\n  chat_context: twice\n", nil, "lingma.chat_context"},
		{"unknown agent session type", "", []string{"POOLGATE_LINGMA_AGENT_SESSION=ide"}, "lingma.agent_session"},
		{"bad rate-limit text", "", []string{"POOLGATE_LINGMA_RATELIMIT_TEXT=(quota"}, "lingma.ratelimit_text"},
		{"empty login text", "lingma_login_text: \"\"\n", nil, "lingma.login_text"},
		{"section key set flat and nested", "lingma_ask_mode: chat\nlingma:\n  ask_mode: agent\n", nil, "lingma_ask_mode and lingma.ask_mode are both set"},
		{"missing password env", "", []string{`POOLGATE_ACCOUNTS=[{"name":"x","password_env":"NOPE"}]`}, "NOPE"},
		{"profiler off loopback", "", []string{"POOLGATE_PPROF_LISTEN=0.0.0.0:6060", "POOLGATE_API_KEYS=k"}, "pprof_listen"},
		{"advertise url with a path", "", append(clustered, "POOLGATE_ADVERTISE_URL=http://h:8080/gw"), "advertise_url"},
		{"advertise url with a user", "", append(clustered, "POOLGATE_ADVERTISE_URL=http://u@h:8080"), "advertise_url"},
		{"advertise url not http", "", append(clustered, "POOLGATE_ADVERTISE_URL=h:8080"), "advertise_url"},
		{"bad peer network", "", append(clustered, "POOLGATE_ADVERTISE_URL=http://h:8080",
			"POOLGATE_CLUSTER_PEER_NETWORKS=10.0.0.0/8,10.0.0.0/33"), `cluster_peer_networks: "10.0.0.0/33"`},
		{"no peer network", "", append(clustered, "POOLGATE_ADVERTISE_URL=http://h:8080", "POOLGATE_CLUSTER_PEER_NETWORKS= "),
			"cluster_peer_networks is empty"},
		{"stray brace in the redis prefix", "", []string{"POOLGATE_REDIS_PREFIX=pg}:"}, "redis_prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = filepath.Join(t.TempDir(), "c.yaml")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := Load(path, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

func TestUnknownEnvWarnsWithSuggestion(t *testing.T) {
	_, warnings, err := Load("", []string{"POOLGATE_MAX_QUEU=3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "POOLGATE_MAX_QUEUE") {
		t.Errorf("warnings %v, want one suggesting POOLGATE_MAX_QUEUE", warnings)
	}
}

func TestPublicListenersWithCredentials(t *testing.T) {
	tests := []struct {
		name string
		give []string
	}{
		{"insecure API, admin on loopback", []string{"POOLGATE_LISTEN=0.0.0.0:8080", "POOLGATE_INSECURE=true", "POOLGATE_ADMIN_LISTEN=127.0.0.1:9090"}},
		{"insecure API, admin token", []string{"POOLGATE_LISTEN=0.0.0.0:8080", "POOLGATE_INSECURE=true", "POOLGATE_ADMIN_TOKEN=t"}},
		{"public admin listener with a token", []string{"POOLGATE_ADMIN_LISTEN=0.0.0.0:9090", "POOLGATE_ADMIN_TOKEN=t"}},
		{"public listeners with API keys", []string{"POOLGATE_LISTEN=0.0.0.0:8080", "POOLGATE_API_KEYS=k", "POOLGATE_ADMIN_LISTEN=0.0.0.0:9090"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := Load("", append(tt.give, sim)); err != nil {
				t.Errorf("got %v, want the configuration accepted", err)
			}
		})
	}
}

func TestPasswordSources(t *testing.T) {
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Load("", []string{
		`POOLGATE_ACCOUNTS=[{"name":"a","password_env":"A_PW"},{"name":"b","password_file":"` + pw + `"}]`,
		"A_PW=fromenv", sim,
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Accounts[0].Password != "fromenv" || cfg.Accounts[1].Password != "s3cret" {
		t.Errorf("passwords not resolved from env and file")
	}
}

// An account without a name is named by its place, never after its
// username: the name goes out to every API caller.
func TestUnnamedAccountsAreNotNamedAfterTheirUsername(t *testing.T) {
	cfg, _, err := Load("", []string{`POOLGATE_ACCOUNTS=[{"username":"dev1@example.com","password":"p"},{"name":"w2","username":"dev2@example.com","password":"p"}]`, sim})
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Accounts[0]; a.Name != "account-1" || !a.Unnamed {
		t.Errorf("unnamed account: %+v, want account-1", a)
	}
	if a := cfg.Accounts[1]; a.Name != "w2" || a.Unnamed {
		t.Errorf("named account: %+v", a)
	}
}

// A setting that does not parse is named, and its URL shown without its
// secrets: a password with a bare '%' is enough to make a Redis URL fail.
func TestErrorsShowNoSecret(t *testing.T) {
	const secret = "Zq%9kW"
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"redis single", []string{"POOLGATE_REDIS_URL=redis://:" + secret + "@redis:6379/0"}, "redis://REDACTED@redis:6379/0"},
		{"redis sentinel, the sentinels' password", []string{"POOLGATE_REDIS_MODE=sentinel",
			"POOLGATE_REDIS_URL=redis://:" + secret + "@s1:26379/0?master_name=m"}, "redis://REDACTED@s1:26379/0"},
		{"redis sentinel, the primary's password", []string{"POOLGATE_REDIS_MODE=sentinel",
			"POOLGATE_REDIS_URL=redis://s1:26379/0?master_name=m&password=" + secret}, "password=REDACTED"},
		{"redis cluster", []string{"POOLGATE_REDIS_MODE=cluster",
			"POOLGATE_REDIS_URL=redis://u:" + secret + "@n1:6379?addr=n2:6379"}, "redis://REDACTED@n1:6379"},
		{"dedicated domain", []string{"POOLGATE_LINGMA_DEDICATED_DOMAIN=ftp://u:" + secret + "@lingma.example"},
			"ftp://REDACTED@lingma.example"},
		{"advertise url", append(clustered, "POOLGATE_ADVERTISE_URL=http://u:"+secret+"@h:8080"), "http://REDACTED@h:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Load("", append(tt.give, sim))
			if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "9kW") {
				t.Errorf("got %v, want an error showing %q and not the password", err, tt.want)
			}
		})
	}
}

func TestBareNumbersAreSeconds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("session_cache_ttl: 1800\nqueue_timeout: 2.5\nstart_timeout: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := Load(path, []string{"POOLGATE_HEALTH_INTERVAL=3"})
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{cfg.SessionCacheTTL, cfg.QueueTimeout, cfg.StartTimeout, cfg.HealthInterval}
	want := []time.Duration{1800 * time.Second, 2500 * time.Millisecond, time.Minute, 3 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}
