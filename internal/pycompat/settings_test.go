package pycompat

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	_ "github.com/poolgate/poolgate/pool/drivers" // the Lingma section, which some settings fill
	"github.com/poolgate/poolgate/pool/lingma"
)

// pythonSettings are the fields of the Python gateway's settings object,
// every one its main module reads (settings.<field>), with the environment
// variable each came from: its own messages name API_KEYS, ADMIN_TOKEN,
// METRICS_PUBLIC, LINGMA_ACCOUNTS and LINGMA_SESSION_BUNDLE; the others
// are the field's name in upper case.
var pythonSettings = map[string]string{
	"accounts": "LINGMA_ACCOUNTS", "admin_token": "ADMIN_TOKEN", "api_keys": "API_KEYS",
	"auto_login_enabled": "AUTO_LOGIN_ENABLED", "auto_login_headless": "AUTO_LOGIN_HEADLESS",
	"auto_login_max_retry": "AUTO_LOGIN_MAX_RETRY", "auto_login_timeout": "AUTO_LOGIN_TIMEOUT",
	"dedicated_domain_url": "DEDICATED_DOMAIN_URL", "default_ask_mode": "DEFAULT_ASK_MODE",
	"default_model": "DEFAULT_MODEL", "gateway_max_in_flight": "GATEWAY_MAX_IN_FLIGHT",
	"gateway_queue_timeout_sec": "GATEWAY_QUEUE_TIMEOUT_SEC", "instance_count": "INSTANCE_COUNT",
	"lingma_bin": "LINGMA_BIN", "lingma_rpc_timeout": "LINGMA_RPC_TIMEOUT", "lingma_socket_port": "LINGMA_SOCKET_PORT",
	"lingma_startup_timeout": "LINGMA_STARTUP_TIMEOUT", "lingma_work_dir": "LINGMA_WORK_DIR",
	"log_level": "LOG_LEVEL", "metrics_public": "METRICS_PUBLIC", "metrics_token": "METRICS_TOKEN",
	"session_cache_max_entries": "SESSION_CACHE_MAX_ENTRIES", "session_cache_ttl_sec": "SESSION_CACHE_TTL_SEC",
	"session_reuse_enabled": "SESSION_REUSE_ENABLED", "tool_allowlist": "TOOL_ALLOWLIST",
	"tool_forward_enabled": "TOOL_FORWARD_ENABLED",
	"":                     "LINGMA_SESSION_BUNDLE", // read by the operator's deployment, not a settings field
}

func TestLegacyTableCoversEveryPythonSetting(t *testing.T) {
	keys := map[string]bool{}
	for _, k := range config.Keys() {
		keys[k] = true
	}
	table := map[string]Setting{}
	for _, l := range Settings() {
		table[l.Env] = l
	}
	for field, env := range pythonSettings {
		l, ok := table[env]
		if !ok {
			t.Errorf("setting %q (%s) is not in the legacy table", field, env)
			continue
		}
		if l.Field != field {
			t.Errorf("%s: field %q, want %q", env, l.Field, field)
		}
		if l.What == "" {
			t.Errorf("%s: says nothing about what poolgate does with it", env)
		}
		if l.Key != "" && !strings.Contains(l.Key, ".") && !keys[l.Key] {
			t.Errorf("%s names poolgate key %q, which does not exist", env, l.Key)
		}
	}
	if len(table) != len(pythonSettings) {
		t.Errorf("the legacy table has %d settings, the Python gateway %d", len(table), len(pythonSettings))
	}
}

// base is a Python gateway environment that loads: one account on a
// worker binary.
var legacyBase = []string{`LINGMA_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw"}]`, "LINGMA_BIN=/opt/lingma/bin/lingma"}

func TestLegacySettingsAreRead(t *testing.T) {
	tests := []struct {
		give string
		want func(config.Config) any
		val  any
	}{
		{"API_KEYS=sk-a,sk-b", func(c config.Config) any { return c.APIKeys.Secrets() }, []string{"sk-a", "sk-b"}},
		{"ADMIN_TOKEN=adm", func(c config.Config) any { return c.AdminToken }, "adm"},
		{"METRICS_TOKEN=mt", func(c config.Config) any { return c.MetricsToken }, "mt"},
		{"METRICS_PUBLIC=True", func(c config.Config) any { return c.MetricsPublic }, true},
		{"LOG_LEVEL=WARNING", func(c config.Config) any { return c.LogLevel }, "warn"},
		{"INSTANCE_COUNT=1", func(c config.Config) any { return len(c.Accounts) }, 1},
		{"LINGMA_SOCKET_PORT=36510", func(c config.Config) any { return c.WorkerBin }, "/opt/lingma/bin/lingma"},
		{"LINGMA_STARTUP_TIMEOUT=45", func(c config.Config) any { return c.StartTimeout }, 45 * time.Second},
		{"LINGMA_RPC_TIMEOUT=7.5", func(c config.Config) any { return c.Section("lingma").(lingma.Settings).RPCTimeout }, 7500 * time.Millisecond},
		{"DEFAULT_MODEL=qwen3-coder", func(c config.Config) any { return c.DefaultModel }, "qwen3-coder"},
		{"DEFAULT_ASK_MODE=agent", func(c config.Config) any { return c.Section("lingma").(lingma.Settings).AskMode }, "agent"},
		{`TOOL_ALLOWLIST=["read","write"]`, func(c config.Config) any { return c.ToolAllowlist }, []string{"read", "write"}},
		{"TOOL_ALLOWLIST=read, write", func(c config.Config) any { return c.ToolAllowlist }, []string{"read", "write"}},
		{"TOOL_FORWARD_ENABLED=false", func(c config.Config) any { return c.ToolForwarding }, false},
		{"DEDICATED_DOMAIN_URL=https://lingma.example.com", func(c config.Config) any { return c.Section("lingma").(lingma.Settings).DedicatedDomain }, "https://lingma.example.com"},
		{"SESSION_REUSE_ENABLED=0", func(c config.Config) any { return c.SessionReuse }, false},
		{"SESSION_CACHE_MAX_ENTRIES=500", func(c config.Config) any { return c.SessionCacheSize }, 500},
		{"SESSION_CACHE_MAX_ENTRIES=0", func(c config.Config) any { return c.SessionReuse }, false},
		{"SESSION_CACHE_TTL_SEC=1800", func(c config.Config) any { return c.SessionCacheTTL }, 30 * time.Minute},
		{"GATEWAY_MAX_IN_FLIGHT=8", func(c config.Config) any { return c.MaxInFlight }, 8},
		{"GATEWAY_QUEUE_TIMEOUT_SEC=15", func(c config.Config) any { return c.QueueTimeout }, 15 * time.Second},
		{"AUTO_LOGIN_ENABLED=no", func(c config.Config) any { return c.AutoLogin }, false},
		{"AUTO_LOGIN_HEADLESS=false", func(c config.Config) any { return c.LoginHeadless }, false},
		{"AUTO_LOGIN_TIMEOUT=120", func(c config.Config) any { return c.LoginTimeout }, 2 * time.Minute},
		{"AUTO_LOGIN_MAX_RETRY=2", func(c config.Config) any { return c.LoginAttempts }, 3},
		{"LINGMA_SESSION_BUNDLE=H4sI", func(c config.Config) any { return c.Accounts[0].SessionBundlePlain }, "H4sI"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			cfg, notes, err := load("", append(slices.Clone(legacyBase), tt.give))
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.want(cfg); !reflect.DeepEqual(got, tt.val) {
				t.Errorf("got %v, want %v", got, tt.val)
			}
			name, _, _ := strings.Cut(tt.give, "=")
			if !slices.ContainsFunc(notes, func(n string) bool { return strings.HasPrefix(n, name+" (Python gateway setting) read") }) {
				t.Errorf("start-up lines %q: none says how %s was read", notes, name)
			}
		})
	}
}

func TestLegacySettingsRefusedNameTheReplacement(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"LINGMA_WORK_DIR=/srv/lingma"}, "poolgate migrate"},
		{[]string{"INSTANCE_COUNT=3"}, "POOLGATE_ACCOUNTS"},
		{[]string{"API_KEYS=a", "POOLGATE_API_KEYS=b"}, "keep POOLGATE_API_KEYS and remove API_KEYS"},
		{[]string{"GATEWAY_QUEUE_TIMEOUT_SEC=soon"}, "GATEWAY_QUEUE_TIMEOUT_SEC (Python gateway setting, poolgate's queue_timeout)"},
		{[]string{"METRICS_PUBLIC=maybe"}, "METRICS_PUBLIC"},
		{[]string{`LINGMA_ACCOUNTS=[{"name":"a","work_dir":"/x"}]`}, `unknown field "work_dir"`},
		{[]string{`LINGMA_ACCOUNTS=[{"name":"a"},{"name":"b"}]`, "LINGMA_BIN=/bin/lingma", "LINGMA_SESSION_BUNDLE=H4sI"}, "session_bundle_plain"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			_, _, err := load("", append(slices.Clone(legacyBase), tt.give...))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// A configuration the daemon would refuse is refused by Load, which
// `poolgate migrate` runs too: the Python gateway's one-instance
// deployment (no LINGMA_ACCOUNTS) is told to run migrate, and a sealed
// bundle without the key that opens it is named.
func TestLoadRefusesWhatCannotStart(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"LINGMA_BIN=/opt/lingma/bin/lingma"}, "`poolgate migrate -env-file OLD/.env -data-dir DIR` makes it an account (lingma-0)"},
		{[]string{"POOLGATE_WORKER_BIN=/opt/lingma/bin/lingma", `POOLGATE_ACCOUNTS=[{"name":"a","session_bundle":"c2VhbGVk"}]`},
			"account a carries a sealed session bundle but bundle_key (POOLGATE_BUNDLE_KEY) is not set"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			_, _, err := load("", tt.give)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// The Python gateway's settings without python_compat get a start-up line
// saying its scripts' shapes are off, and how to turn them on.
func TestLegacySettingsNamePythonCompat(t *testing.T) {
	tests := []struct {
		give []string
		want bool
	}{
		{legacyBase, true},
		{append(slices.Clone(legacyBase), "POOLGATE_PYTHON_COMPAT=true"), false},
		{[]string{"POOLGATE_WORKER_BIN=/opt/lingma", `POOLGATE_ACCOUNTS=[{"name":"a"}]`}, false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			_, notes, err := load("", tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(notes, compatNote); got != tt.want {
				t.Errorf("start-up lines %q: python_compat line %v, want %v", notes, got, tt.want)
			}
		})
	}
}

// load loads a configuration as the daemon does: with the Python gateway's
// settings read.
func load(path string, environ []string) (config.Config, []string, error) {
	return config.Load(path, environ, ReadSettings)
}
