// Package config is poolgate's configuration: one struct read from an
// optional YAML file and POOLGATE_* environment variables (the same keys),
// decoded strictly and validated once. Only cmd/poolgate/internal/daemon uses it; it hands
// each package its own typed sub-config.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// Account is one upstream account.
type Account struct {
	Name     string `yaml:"name" json:"name"`
	Username string `yaml:"username" json:"username"`
	// Password is never logged; PasswordEnv or PasswordFile may supply it.
	Password     string            `yaml:"password" json:"password"`
	PasswordEnv  string            `yaml:"password_env" json:"password_env"`
	PasswordFile string            `yaml:"password_file" json:"password_file"`
	Env          map[string]string `yaml:"env" json:"env"`
	// Args are extra worker arguments for this account only.
	Args []string `yaml:"args" json:"args"`
	// SessionBundle is a sealed session bundle (base64) restored at start.
	SessionBundle     string `yaml:"session_bundle" json:"session_bundle"`
	SessionBundleFile string `yaml:"session_bundle_file" json:"session_bundle_file"`
	// SessionBundlePlain is an unsealed bundle, the Python gateway's format
	// (base64 of a tar.gz of a work dir, or its export's JSON): its
	// credential files are installed into an empty work dir at start, with
	// no bundle_key needed.
	SessionBundlePlain string `yaml:"session_bundle_plain" json:"session_bundle_plain"`
	// Recipe names the login recipe for this account (default by driver).
	Recipe string `yaml:"recipe" json:"recipe"`
	// Driver is the account's kind of worker ("" = the top-level
	// driver), so that one pool mixes kinds; each kind's own settings stay
	// in its section.
	Driver string `yaml:"driver" json:"driver"`
	// WorkerBin and WorkerArgs are the account's worker binary ("" = the
	// top-level worker_bin) and the driver's arguments after it (none =
	// the top-level worker_args for an account of the top-level driver,
	// else none): accounts of another kind than the top-level driver's
	// run another program. Args follow them all.
	WorkerBin  string   `yaml:"worker_bin" json:"worker_bin"`
	WorkerArgs []string `yaml:"worker_args" json:"worker_args"`
	// Models are the model ids the account serves, for routing by model
	// (none = the models its worker lists).
	Models []string `yaml:"models" json:"models"`
	// Record writes a transcript of each of this account's turns, as
	// a driver's record setting does for every account.
	Record bool `yaml:"record" json:"record"`
	// Unnamed: the configuration gave no name, so it is account-N by the
	// account's place (never its username, which API callers would see).
	Unnamed bool `yaml:"-" json:"-"`
}

// Config is every setting. The yaml tag is the key; the environment variable
// is POOLGATE_ plus the key in upper case. Each field's default is in Defaults.
type Config struct {
	Listen        string        `yaml:"listen"`         // API listen address (127.0.0.1:8080)
	AdminListen   string        `yaml:"admin_listen"`   // separate admin listener ("" = same as API)
	APIKeys       APIKeys       `yaml:"api_keys"`       // keys of the API, bare or named with limits (none = loopback only)
	AdminToken    string        `yaml:"admin_token"`    // Bearer token of the admin API ("" = only keys with role admin)
	MetricsToken  string        `yaml:"metrics_token"`  // Bearer token for /metrics
	MetricsPublic bool          `yaml:"metrics_public"` // serve /metrics without a token (false)
	Insecure      bool          `yaml:"insecure"`       // allow a non-loopback listen without API keys (false)
	PprofListen   string        `yaml:"pprof_listen"`   // loopback address for Go's profiler, unauthenticated ("" = off)
	MaxBodyBytes  int64         `yaml:"max_body_bytes"` // request body cap in bytes (16 MiB)
	BodyTimeout   time.Duration `yaml:"body_timeout"`   // longest a request body may take to arrive (60s)
	WriteTimeout  time.Duration `yaml:"write_timeout"`  // longest a write to a client may wait for it to read: a whole JSON answer (plus a second per MiB), each piece of a stream or a relayed hop; past it the request ends and its connection closes (30s)
	LogLevel      string        `yaml:"log_level"`      // debug, info, warn, error (info)
	LogFormat     string        `yaml:"log_format"`     // text or json (text)

	MaxUnauthenticatedConns int   `yaml:"max_unauthenticated_conns"` // connections one listener keeps open before any request on them showed a key or token; past it the oldest is closed (1024)
	MaxConns                int   `yaml:"max_conns"`                 // client connections open at once over the API and admin listeners; past it the oldest that showed no credential is closed, else the new one (0 = what the open-file limit leaves: the limit less a quarter of it, at least 128, and at least half of it)
	MaxConnsPerKey          int   `yaml:"max_conns_per_key"`         // connections whose latest request came with one API key; a request past it gets 429 and its connection is closed (0 = half of max_conns)
	BodyBudgetBytes         int64 `yaml:"body_budget_bytes"`         // bytes of API request bodies held at once, gateway-wide; past it a request gets 429 with Retry-After before its body is read (0 = an eighth of the memory the process may use, at least 4 times max_body_bytes)
	BodyBudgetPerKey        int64 `yaml:"body_budget_per_key"`       // bytes of body_budget_bytes one API key's requests may hold at once, so one key cannot take the others' room (0 = half of it, at least max_body_bytes)

	Driver       string    `yaml:"driver"`         // the kind of worker of the accounts that name none: lingma, openai, claude-code or qoder (lingma)
	WorkerAPIKey string    `yaml:"worker_api_key"` // Bearer key sent to openai-driver workers
	DataDir      string    `yaml:"data_dir"`       // parent of the per-account work dirs
	WorkerBin    string    `yaml:"worker_bin"`     // worker binary of the accounts that name none ("" = this executable's simworker, see simulate)
	Simulate     string    `yaml:"simulate"`       // the bundled simulator serves the pool: auto, true or false (auto)
	WorkerArgs   []string  `yaml:"worker_args"`    // extra worker arguments of the top-level driver's accounts
	Accounts     []Account `yaml:"accounts"`       // the accounts, one worker each; a JSON list in the environment (none = two simulated accounts)
	AccountsFile string    `yaml:"accounts_file"`  // YAML or JSON file with the account list

	// WorkerMaxTurnBytes exists because a worker that is sent more than it
	// takes may drop its whole connection, not just refuse the turn.
	WorkerMaxTurnBytes int64 `yaml:"worker_max_turn_bytes"` // largest turn sent to a worker as encoded for it (a Lingma frame, a model server's request body); a larger one gets 413 before any worker sees it (16 MiB)

	// SimDirectives is off by default because any caller writes prompts.
	SimDirectives bool `yaml:"sim_directives"` // the bundled simulator obeys the [[sim:...]] directives in prompts (crashes, logouts, delays, answer sizes): for tests and demonstrations only (false)

	InstanceMaxInFlight int           `yaml:"instance_max_in_flight"` // turns at once per instance (1)
	MaxInFlight         int           `yaml:"max_in_flight"`          // turns at once in the pool (64)
	MaxQueue            int           `yaml:"max_queue"`              // requests waiting for a slot (256)
	QueueTimeout        time.Duration `yaml:"queue_timeout"`          // longest wait for a slot (60s)
	Retries             int           `yaml:"retries"`                // retries on other instances before the first byte (2)
	StartTimeout        time.Duration `yaml:"start_timeout"`          // worker start to ready (20s)
	HealthInterval      time.Duration `yaml:"health_interval"`        // between health checks (5s)
	HealthTimeout       time.Duration `yaml:"health_timeout"`         // one health check (3s)
	BackoffMax          time.Duration `yaml:"backoff_max"`            // restart backoff cap (30s)
	ShutdownGrace       time.Duration `yaml:"shutdown_grace"`         // in-flight grace on shutdown (30s)

	StreamKeepAlive time.Duration `yaml:"stream_keepalive"` // longest silence on a stream before a keep-alive (15s)
	// Sections are the drivers' own settings by section name, each a
	// pointer to the struct its driver registered (Register): the yaml
	// key NAME, the environment POOLGATE_NAME_KEY. They read and document
	// as if they were fields here, in this place. Load fills them; a copy
	// of a Config shares them, so nothing changes them after.
	Sections map[string]any `yaml:"-"`

	ToolAllowlist  []string `yaml:"tool_allowlist"`  // tools that may be offered to workers (none = all)
	ToolForwarding bool     `yaml:"tool_forwarding"` // offer the request's tools to workers at all (true)

	SessionReuse     bool          `yaml:"session_reuse"`      // continue upstream sessions on follow-ups (true)
	SessionCacheSize int           `yaml:"session_cache_size"` // affinity entries kept in memory (10000)
	SessionCacheTTL  time.Duration `yaml:"session_cache_ttl"`  // life of an affinity entry after its last turn (30m)

	DefaultModel string            `yaml:"default_model"` // model for unknown names ("" = first listed); which names take it: docs/routing.md
	ModelAliases map[string]string `yaml:"model_aliases"` // client model name -> pool model; a JSON object in the environment
	// DefaultModelNames exists because coding agents send their vendor's
	// model names (claude-sonnet-4-5, gpt-5-codex) unless told otherwise,
	// while any other name no account serves is more likely a mistake.
	DefaultModelNames []string `yaml:"default_model_names"` // in a pool of several kinds, the unknown model names (shell patterns) that take default_model instead of a 404; in a pool of one kind every unknown name takes it (the coding agents' names: claude-*, gpt-*, o[0-9]*, codex-*, gemini-*, qwen*)

	BundleKey         string `yaml:"bundle_key"`          // base64 of 32 bytes sealing session bundles ("" = bundles off)
	RedisURL          string `yaml:"redis_url"`           // Redis URL ("" = in-memory store), in redis_mode's form
	RedisMode         string `yaml:"redis_mode"`          // single, sentinel or cluster (single); docs/redis.md
	RedisPrefix       string `yaml:"redis_prefix"`        // Redis key prefix (poolgate:)
	RedisPasswordFile string `yaml:"redis_password_file"` // file with the password of the Redis servers that hold the data, in place of redis_url's ("" = the URL's)
	RedisTLSCAFile    string `yaml:"redis_tls_ca_file"`   // PEM file of the certificates that verify Redis's TLS certificates with rediss:// ("" = the system's roots)

	UsageRetentionDays int  `yaml:"usage_retention_days"` // days of per-key, per-account usage kept (90)
	RequestLogSize     int  `yaml:"request_log_size"`     // requests kept in the request log (1000)
	RequestLogBytes    int  `yaml:"request_log_bytes"`    // cap of the request log in bytes (4 MiB)
	RequestLogDebug    bool `yaml:"request_log_debug"`    // keep prompts and answers in the request log (false)

	StoredResponsesPerKey     int   `yaml:"stored_responses_per_key"`      // Responses kept in Redis per API key (1000)
	StoredResponseBytesPerKey int64 `yaml:"stored_response_bytes_per_key"` // their total size per API key (64 MiB)

	AutoLogin        bool          `yaml:"auto_login"`        // log logged-out workers in with headless Chromium (true)
	Chromium         string        `yaml:"chromium"`          // Chromium binary ("" = chromium on PATH)
	LoginConcurrency int           `yaml:"login_concurrency"` // browsers at once (2)
	LoginRecipes     string        `yaml:"login_recipes"`     // YAML file with login recipes
	LoginStealth     bool          `yaml:"login_stealth"`     // go-rod/stealth pages for guarded login pages (false)
	LoginRecipe      string        `yaml:"login_recipe"`      // default recipe (simworker; lingma-alibaba for real Lingma)
	LoginTimeout     time.Duration `yaml:"login_timeout"`     // one login attempt, browser start to confirmation (3m)
	LoginAttempts    int           `yaml:"login_attempts"`    // attempts of one login before it gives up (3)
	LoginHeadless    bool          `yaml:"login_headless"`    // run the login browser without a window (true)

	BundleImportPlain bool `yaml:"bundle_import_plain"` // accept unsealed base64 tar.gz bundles on import (false)
	BundleExportPlain bool `yaml:"bundle_export_plain"` // answer session exports unsealed, in the Python gateway's form (bundle_b64), to move a login back to it (false)
	PythonCompat      bool `yaml:"python_compat"`       // answer in the Python gateway's shapes where its scripts read them: served_by, output_text, [DONE], detail, 401 when logged out, its auto-login answers (false)

	AdvertiseURL          string        `yaml:"advertise_url"`            // this replica's URL for the others ("" = no cluster)
	ClusterToken          string        `yaml:"cluster_token"`            // shared secret the replicas derive their hop keys from; never sent
	ClusterPeerNetworks   []string      `yaml:"cluster_peer_networks"`    // CIDR prefixes replica URLs may lead into, checked on the address dialed (loopback and private ranges)
	ReplicaID             string        `yaml:"replica_id"`               // replica name in /internal/cluster; a per-start suffix is added ("" = the host name)
	LeaseTTL              time.Duration `yaml:"lease_ttl"`                // account lease lifetime (15s)
	MaxAccountsPerReplica int           `yaml:"max_accounts_per_replica"` // accounts one replica holds (0 = fair share)
}

// Defaults returns the configuration with every default filled in.
func Defaults() Config {
	return Config{
		Listen:                    "127.0.0.1:8080",
		MaxBodyBytes:              16 << 20,
		WorkerMaxTurnBytes:        16 << 20,
		BodyTimeout:               60 * time.Second,
		MaxUnauthenticatedConns:   1024,
		WriteTimeout:              30 * time.Second,
		LogLevel:                  "info",
		LogFormat:                 "text",
		Driver:                    "lingma",
		DefaultModelNames:         []string{"claude-*", "gpt-*", "o[0-9]*", "codex-*", "gemini-*", "qwen*"},
		Sections:                  sectionDefaults(),
		Simulate:                  "auto",
		DataDir:                   defaultDataDir(),
		InstanceMaxInFlight:       1,
		MaxInFlight:               64,
		MaxQueue:                  256,
		QueueTimeout:              60 * time.Second,
		Retries:                   2,
		StartTimeout:              20 * time.Second,
		HealthInterval:            5 * time.Second,
		HealthTimeout:             3 * time.Second,
		BackoffMax:                30 * time.Second,
		ShutdownGrace:             30 * time.Second,
		RedisPrefix:               "poolgate:",
		RedisMode:                 string(redisconn.Single),
		StoredResponsesPerKey:     1000,
		UsageRetentionDays:        90,
		RequestLogSize:            1000,
		RequestLogBytes:           4 << 20,
		StoredResponseBytesPerKey: 64 << 20,
		LeaseTTL:                  15 * time.Second,
		ClusterPeerNetworks:       []string{"127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"},
		StreamKeepAlive:           15 * time.Second,
		ToolForwarding:            true,
		SessionReuse:              true,
		SessionCacheSize:          10000,
		SessionCacheTTL:           30 * time.Minute,
		LoginTimeout:              3 * time.Minute,
		LoginAttempts:             3,
		LoginHeadless:             true,
		AutoLogin:                 true,
		LoginConcurrency:          2,
	}
}

func defaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "poolgate")
	}
	return filepath.Join(os.TempDir(), "poolgate")
}

// DefaultAccounts are the simulated accounts served with no configuration.
func DefaultAccounts() []Account {
	return []Account{
		{Name: "sim-1", Username: "demo1", Password: "demo1"},
		{Name: "sim-2", Username: "demo2", Password: "demo2"},
	}
}

const envPrefix = "POOLGATE_"

// Legacy reads another gateway's settings, which an operator moving over
// brings along in the environment (internal/pycompat's ReadSettings, the
// Python gateway's): Load hands it the environment before its own variables
// are read, and runs finish once they are and the accounts are known. Each
// returns start-up lines to log.
type Legacy func(cfg *Config, env map[string]string) (notes []string, finish func(*Config) ([]string, error), err error)

// Load builds the configuration: defaults, then the YAML file (if path is
// set), then what a legacy reads (at most one), then the environment. It
// returns warnings (unknown POOLGATE_ variables) separately from errors.
func Load(path string, environ []string, legacy ...Legacy) (Config, []string, error) {
	cfg := Defaults()
	var flat []string
	if path != "" {
		var err error
		if flat, err = decodeFile(&cfg, path); err != nil {
			return cfg, nil, err
		}
	}
	env := envMap(environ)
	var notes []string
	finish := func(*Config) ([]string, error) { return nil, nil }
	for _, read := range legacy {
		var err error
		if notes, finish, err = read(&cfg, env); err != nil {
			return cfg, append(flat, notes...), err
		}
	}
	warnings, err := applyEnv(&cfg, environ)
	warnings = append(flat, append(notes, warnings...)...) // a flat section key is poolgate's own, not a legacy one
	if err != nil {
		return cfg, warnings, err
	}
	if cfg.AccountsFile != "" {
		if err := loadAccountsFile(&cfg); err != nil {
			return cfg, warnings, err
		}
	}
	if err := cfg.resolveAccounts(env); err != nil {
		return cfg, warnings, err
	}
	more, err := finish(&cfg)
	if warnings = append(warnings, more...); err != nil {
		return cfg, warnings, err
	}
	if err := cfg.resolveKeys(env); err != nil {
		return cfg, warnings, err
	}
	return cfg, warnings, cfg.Validate()
}

// decodeFile decodes the YAML file strictly into cfg. A bare number given
// for a duration is seconds (yaml would take it as nanoseconds). A
// section's key written flat (section_key for section: key:) is
// still read; the returned notes say so, one a key.
func decodeFile(cfg *Config, path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil, nil // an empty file is fine
	}
	notes, err := nestFlatKeys(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	typ, _ := shape()
	secondsInYAML(doc.Content[0], typ)
	if b, err = yaml.Marshal(&doc); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	v := cfg.view()
	if err := dec.Decode(v.Addr().Interface()); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("config %s: %w", path, nameShape(err, typ))
	}
	cfg.store(v)
	return notes, nil
}

// nameShape calls the shape typ config.Config in a decoding error, which
// would otherwise spell out the whole struct.
func nameShape(err error, typ reflect.Type) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	out := &yaml.TypeError{Errors: make([]string, len(te.Errors))}
	for i, e := range te.Errors {
		out.Errors[i] = strings.ReplaceAll(e, typ.String(), "config.Config")
	}
	return out
}

// secondsInYAML rewrites the bare numbers of duration keys in a mapping
// of t (the Config or one of its sections) as seconds ("1800" -> "1800s").
func secondsInYAML(m *yaml.Node, t reflect.Type) {
	if m.Kind != yaml.MappingNode {
		return
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		fields[t.Field(i).Tag.Get("yaml")] = t.Field(i).Type
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		switch typ := fields[k.Value]; {
		case typ == reflect.TypeFor[time.Duration]() && v.Kind == yaml.ScalarNode && (v.Tag == "!!int" || v.Tag == "!!float"):
			v.Value, v.Tag, v.Style = v.Value+"s", "!!str", 0
		case typ != nil && isSection(typ):
			secondsInYAML(v, typ)
		}
	}
}

func loadAccountsFile(cfg *Config) error {
	b, err := os.ReadFile(cfg.AccountsFile)
	if err != nil {
		return fmt.Errorf("accounts_file: %w", err)
	}
	var accts []Account
	dec := yaml.NewDecoder(bytes.NewReader(b)) // YAML is a superset of JSON
	dec.KnownFields(true)
	if err := dec.Decode(&accts); err != nil {
		return fmt.Errorf("accounts_file %s: %w", cfg.AccountsFile, err)
	}
	cfg.Accounts = append(cfg.Accounts, accts...)
	return nil
}

// resolveAccounts fills passwords from password_env / password_file and
// defaults account names to account-N: a name shows in every answer's
// X-Poolgate-Instance header, so it never defaults to the username.
func (c *Config) resolveAccounts(env map[string]string) error {
	for i := range c.Accounts {
		a := &c.Accounts[i]
		if a.Name == "" {
			a.Name, a.Unnamed = "account-"+strconv.Itoa(i+1), true
		}
		var err error
		trim := func(s string) string { return strings.TrimRight(s, "\r\n") }
		if a.Password, err = secret("account "+a.Name+": password", a.Password, a.PasswordEnv, a.PasswordFile, env, trim); err != nil {
			return err
		}
	}
	return nil
}

// secret is an API key's or a password: val, else the environment
// variable envVar, else a file's trimmed text; what names it in errors.
func secret(what, val, envVar, file string, env map[string]string, trim func(string) string) (string, error) {
	switch {
	case val != "":
	case envVar != "":
		if val = env[envVar]; val == "" {
			return "", fmt.Errorf("%s_env %s is empty or unset", what, envVar)
		}
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s_file: %w", what, err)
		}
		val = trim(string(b))
	}
	return val, nil
}

func envMap(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Validate checks the configuration once.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("listen %q: %w", c.Listen, err))
	}
	if c.AdminListen != "" {
		if _, _, err := net.SplitHostPort(c.AdminListen); err != nil {
			errs = append(errs, fmt.Errorf("admin_listen %q: %w", c.AdminListen, err))
		}
	}
	// The profiler has no credentials of its own, so it may only bind loopback.
	if c.PprofListen != "" && !IsLoopback(c.PprofListen) {
		errs = append(errs, fmt.Errorf("pprof_listen %q: the profiler serves without credentials, so it must be a loopback address such as 127.0.0.1:6060", c.PprofListen))
	}
	if len(c.APIKeys) == 0 && !c.Insecure && !IsLoopback(c.Listen) {
		errs = append(errs, fmt.Errorf("listen %q is not a loopback address and no api_keys are set: set POOLGATE_API_KEYS, or POOLGATE_INSECURE=true to serve without auth", c.Listen))
	}
	// The admin API drains, restarts and exports accounts: it never runs
	// open on a network, whatever insecure says about the public API.
	if admin := c.adminListener(); !IsLoopback(admin) && c.AdminToken == "" && len(c.APIKeys) == 0 {
		errs = append(errs, fmt.Errorf("the admin API would listen on %q, which is not a loopback address, with no credentials: set POOLGATE_ADMIN_TOKEN (or POOLGATE_API_KEYS with a key of role admin), or put it on a loopback POOLGATE_ADMIN_LISTEN", admin))
	}
	errs = append(errs, c.validateKeys()...)
	if err := c.validateSimulate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateAccounts()...)
	positive := map[string]int64{"max_body_bytes": c.MaxBodyBytes, "instance_max_in_flight": int64(c.InstanceMaxInFlight),
		"max_in_flight": int64(c.MaxInFlight), "max_queue": int64(c.MaxQueue),
		"stored_responses_per_key": int64(c.StoredResponsesPerKey), "stored_response_bytes_per_key": c.StoredResponseBytesPerKey,
		"session_cache_size": int64(c.SessionCacheSize), "login_attempts": int64(c.LoginAttempts),
		"usage_retention_days": int64(c.UsageRetentionDays), "request_log_size": int64(c.RequestLogSize),
		"request_log_bytes": int64(c.RequestLogBytes), "worker_max_turn_bytes": c.WorkerMaxTurnBytes,
		"max_unauthenticated_conns": int64(c.MaxUnauthenticatedConns)}
	sized := map[string]int64{"body_budget_bytes": c.BodyBudgetBytes, "body_budget_per_key": c.BodyBudgetPerKey,
		"max_conns": int64(c.MaxConns), "max_conns_per_key": int64(c.MaxConnsPerKey)}
	for k, v := range sized {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s must be 0 (sized for the machine) or positive, got %d", k, v))
		}
	}
	if c.WriteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("write_timeout must be positive, got %s", c.WriteTimeout))
	}
	for k, v := range positive {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", k, v))
		}
	}
	if c.RedisURL != "" || c.RedisPasswordFile != "" || c.RedisTLSCAFile != "" ||
		(c.RedisMode != "" && c.RedisMode != string(redisconn.Single)) {
		if err := redisconn.Check(c.Redis()); err != nil {
			errs = append(errs, err)
		}
	}
	if _, ok := redisconn.Beside(c.RedisPrefix+"requests", ""); !ok {
		// Stores keep a key beside another in its Cluster slot by bracing
		// the other's name, which a stray '}' would break.
		errs = append(errs, fmt.Errorf("redis_prefix %q: a '}' may only close a hash tag, as in the prefix {poolgate}:app", c.RedisPrefix))
	}
	if c.AdvertiseURL != "" {
		if c.RedisURL == "" {
			errs = append(errs, errors.New("advertise_url turns on clustering, which needs redis_url (POOLGATE_REDIS_URL)"))
		}
		if c.ClusterToken == "" {
			errs = append(errs, errors.New("advertise_url turns on clustering, which needs cluster_token (POOLGATE_CLUSTER_TOKEN)"))
		}
		if c.LeaseTTL < 2*time.Second {
			errs = append(errs, fmt.Errorf("lease_ttl %s is too short (at least 2s)", c.LeaseTTL))
		}
		errs = append(errs, c.validatePeers()...)
	}
	for k, d := range map[string]time.Duration{"body_timeout": c.BodyTimeout,
		"session_cache_ttl": c.SessionCacheTTL, "login_timeout": c.LoginTimeout, "stream_keepalive": c.StreamKeepAlive} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", k, d))
		}
	}
	errs = append(errs, c.sectionErrors()...)
	if c.Retries < 0 {
		errs = append(errs, fmt.Errorf("retries must be >= 0, got %d", c.Retries))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log_format %q: use text or json", c.LogFormat))
	}
	return errors.Join(errs...)
}

// adminListener is the address the admin API and /metrics listen on.
func (c *Config) adminListener() string {
	if c.AdminListen != "" {
		return c.AdminListen
	}
	return c.Listen
}

// IsLoopback reports whether a listen address binds only loopback.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Reloadable reports whether a live reload (SIGHUP, POST /internal/reload)
// applies a new value of the key. Every other key is wired into a
// listener, a store, the driver or the pool's limits at start, so a reload
// reports it as needing a restart and leaves it as it is.
func Reloadable(key string) bool {
	switch key {
	case "accounts", "accounts_file", "api_keys":
		return true
	}
	return false
}
