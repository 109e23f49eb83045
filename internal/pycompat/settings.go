package pycompat

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/config"
)

// The Python gateway poolgate replaces read its own environment variables
// (API_KEYS, LINGMA_ACCOUNTS, GATEWAY_QUEUE_TIMEOUT_SEC, ...). An operator
// who moves over brings that environment along, so every one of them is
// either read under its old name, with a start-up line naming poolgate's
// key, or refused with an error naming what replaces it: none is ignored
// without a word.

// Setting is one setting of the Python gateway.
type Setting struct {
	// Field is the setting's name in the Python gateway (settings.<field>;
	// "" for the one it read outside its settings, the global bundle).
	Field string
	// Env is the environment variable it was read from.
	Env string
	// Key is the poolgate key that takes the value ("" for none).
	Key string
	// What says what poolgate does with it, for the start-up line and the
	// migration doc.
	What string
	// apply sets the value on cfg; nil: the setting is refused with What
	// as the error.
	apply func(cfg *config.Config, val string, p *pending) error
}

// Refused reports whether poolgate refuses to start with the setting.
func (l Setting) Refused() bool { return l.apply == nil }

// pending is what the settings leave for config.Load to finish once every
// account is known.
type pending struct {
	globalBundle string // LINGMA_SESSION_BUNDLE
}

// Settings returns the Python gateway's settings and what poolgate does
// with each, in the Python gateway's order.
func Settings() []Setting {
	str := func(set func(*config.Config, string)) func(*config.Config, string, *pending) error {
		return func(c *config.Config, v string, _ *pending) error { set(c, v); return nil }
	}
	secs := func(set func(*config.Config, time.Duration)) func(*config.Config, string, *pending) error {
		return func(c *config.Config, v string, _ *pending) error {
			d, err := config.ParseDuration(v)
			if err != nil {
				return err
			}
			set(c, d)
			return nil
		}
	}
	boolean := func(set func(*config.Config, bool)) func(*config.Config, string, *pending) error {
		return func(c *config.Config, v string, _ *pending) error {
			b, err := parseBool(v)
			if err != nil {
				return err
			}
			set(c, b)
			return nil
		}
	}
	integer := func(set func(*config.Config, int) error) func(*config.Config, string, *pending) error {
		return func(c *config.Config, v string, _ *pending) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return fmt.Errorf("want an integer, got %q", v)
			}
			return set(c, n)
		}
	}
	return []Setting{
		{"api_keys", "API_KEYS", "api_keys", "the same comma-separated keys, as users: unlike the Python gateway, they do not open the admin API (ADMIN_TOKEN does)", func(c *config.Config, v string, _ *pending) error {
			return c.APIKeys.ParseEnv(v)
		}},
		{"admin_token", "ADMIN_TOKEN", "admin_token", "the same token; the API keys are no longer admin credentials", str(func(c *config.Config, v string) { c.AdminToken = v })},
		{"metrics_token", "METRICS_TOKEN", "metrics_token", "the same token", str(func(c *config.Config, v string) { c.MetricsToken = v })},
		{"metrics_public", "METRICS_PUBLIC", "metrics_public", "the same switch", boolean(func(c *config.Config, b bool) { c.MetricsPublic = b })},
		{"log_level", "LOG_LEVEL", "log_level", "the same level, in lower case (WARNING is warn, CRITICAL is error)", func(c *config.Config, v string, _ *pending) error {
			lvl, ok := map[string]string{"debug": "debug", "info": "info", "warning": "warn", "warn": "warn",
				"error": "error", "critical": "error"}[strings.ToLower(strings.TrimSpace(v))]
			if !ok {
				return fmt.Errorf("want DEBUG, INFO, WARNING, ERROR or CRITICAL, got %q", v)
			}
			c.LogLevel = lvl
			return nil
		}},
		{"accounts", "LINGMA_ACCOUNTS", "accounts", "the same JSON list; an account's session_bundle is a plain bundle (session_bundle_plain)", func(c *config.Config, v string, _ *pending) error {
			accts, err := parseAccounts(v)
			if err != nil {
				return err
			}
			c.Accounts = append(c.Accounts, accts...)
			return nil
		}},
		{"", "LINGMA_SESSION_BUNDLE", "accounts[0].session_bundle_plain", "the plain bundle of the only account; refused with several accounts", func(_ *config.Config, v string, p *pending) error {
			p.globalBundle = strings.TrimSpace(v)
			return nil
		}},
		{"instance_count", "INSTANCE_COUNT", "", "one worker per account: 1 is what poolgate does, more is refused (list more accounts instead)", func(_ *config.Config, v string, _ *pending) error {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n != 1 {
				return fmt.Errorf("%q: poolgate runs one worker per account (a second process on one login adds no upstream capacity); list one account per worker in POOLGATE_ACCOUNTS and remove INSTANCE_COUNT", v)
			}
			return nil
		}},
		{"lingma_bin", "LINGMA_BIN", "worker_bin", "the same binary", str(func(c *config.Config, v string) { c.WorkerBin = v })},
		{"lingma_work_dir", "LINGMA_WORK_DIR", "data_dir", "refused: poolgate keeps account NAME's work dir at data_dir/workers/NAME; run `poolgate migrate` to move the old work dirs there, then set POOLGATE_DATA_DIR and remove LINGMA_WORK_DIR", nil},
		{"lingma_socket_port", "LINGMA_SOCKET_PORT", "", "not needed: poolgate gives each worker free loopback ports of its own", str(func(*config.Config, string) {})},
		{"lingma_startup_timeout", "LINGMA_STARTUP_TIMEOUT", "start_timeout", "seconds", secs(func(c *config.Config, d time.Duration) { c.StartTimeout = d })},
		{"lingma_rpc_timeout", "LINGMA_RPC_TIMEOUT", "lingma.rpc_timeout", "seconds", func(c *config.Config, v string, _ *pending) error {
			d, err := config.ParseDuration(v)
			if err != nil {
				return err
			}
			return c.SetSectionKey("lingma.rpc_timeout", d)
		}},
		{"default_model", "DEFAULT_MODEL", "default_model", "the same model name", str(func(c *config.Config, v string) { c.DefaultModel = v })},
		{"default_ask_mode", "DEFAULT_ASK_MODE", "lingma.ask_mode", "the same mode (chat or agent)", func(c *config.Config, v string, _ *pending) error {
			return c.SetSectionKey("lingma.ask_mode", strings.ToLower(strings.TrimSpace(v)))
		}},
		{"tool_allowlist", "TOOL_ALLOWLIST", "tool_allowlist", "the same names, comma-separated or a JSON list", func(c *config.Config, v string, _ *pending) error {
			list, err := parseList(v)
			c.ToolAllowlist = list
			return err
		}},
		{"tool_forward_enabled", "TOOL_FORWARD_ENABLED", "tool_forwarding", "the same switch", boolean(func(c *config.Config, b bool) { c.ToolForwarding = b })},
		{"dedicated_domain_url", "DEDICATED_DOMAIN_URL", "lingma.dedicated_domain", "the same URL", func(c *config.Config, v string, _ *pending) error {
			return c.SetSectionKey("lingma.dedicated_domain", strings.TrimSpace(v))
		}},
		{"session_reuse_enabled", "SESSION_REUSE_ENABLED", "session_reuse", "the same switch", boolean(func(c *config.Config, b bool) { c.SessionReuse = b })},
		{"session_cache_max_entries", "SESSION_CACHE_MAX_ENTRIES", "session_cache_size", "the same count; 0 turns session reuse off, as it did", integer(func(c *config.Config, n int) error {
			switch {
			case n < 0:
				return fmt.Errorf("want 0 or more, got %d", n)
			case n == 0:
				c.SessionReuse = false
			default:
				c.SessionCacheSize = n
			}
			return nil
		})},
		{"session_cache_ttl_sec", "SESSION_CACHE_TTL_SEC", "session_cache_ttl", "seconds", secs(func(c *config.Config, d time.Duration) { c.SessionCacheTTL = d })},
		{"gateway_max_in_flight", "GATEWAY_MAX_IN_FLIGHT", "max_in_flight", "the same count", integer(func(c *config.Config, n int) error { c.MaxInFlight = n; return nil })},
		{"gateway_queue_timeout_sec", "GATEWAY_QUEUE_TIMEOUT_SEC", "queue_timeout", "seconds", secs(func(c *config.Config, d time.Duration) { c.QueueTimeout = d })},
		{"auto_login_enabled", "AUTO_LOGIN_ENABLED", "auto_login", "the same switch", boolean(func(c *config.Config, b bool) { c.AutoLogin = b })},
		{"auto_login_headless", "AUTO_LOGIN_HEADLESS", "login_headless", "the same switch", boolean(func(c *config.Config, b bool) { c.LoginHeadless = b })},
		{"auto_login_timeout", "AUTO_LOGIN_TIMEOUT", "login_timeout", "seconds, one attempt", secs(func(c *config.Config, d time.Duration) { c.LoginTimeout = d })},
		{"auto_login_max_retry", "AUTO_LOGIN_MAX_RETRY", "login_attempts", "retries after the first attempt: N is login_attempts N+1", integer(func(c *config.Config, n int) error {
			if n < 0 {
				return fmt.Errorf("want 0 or more, got %d", n)
			}
			c.LoginAttempts = n + 1
			return nil
		})},
	}
}

// ReadSettings reads the Python gateway's variables from env into cfg, as
// config.Load asks its Legacy to: one start-up line per variable read; a
// variable poolgate has no place for, or one set beside its POOLGATE_
// twin, is refused. finish gives LINGMA_SESSION_BUNDLE to the only account
// once the accounts are known, and adds compatNote when the settings were
// read but python_compat is off.
func ReadSettings(cfg *config.Config, env map[string]string) (notes []string, finish func(*config.Config) ([]string, error), err error) {
	var p pending
	var errs []error
	for _, l := range Settings() {
		val, ok := env[l.Env]
		if !ok {
			continue
		}
		if l.Refused() {
			errs = append(errs, fmt.Errorf("%s (Python gateway setting) is %s", l.Env, l.What))
			continue
		}
		if l.Key != "" && !strings.Contains(l.Key, "[") {
			if _, twin := env[config.EnvName(l.Key)]; twin {
				errs = append(errs, fmt.Errorf("%s (Python gateway setting) and %s are both set: keep %s and remove %s",
					l.Env, config.EnvName(l.Key), config.EnvName(l.Key), l.Env))
				continue
			}
		}
		if err := l.apply(cfg, val, &p); err != nil {
			errs = append(errs, fmt.Errorf("%s (Python gateway setting, poolgate's %s): %w", l.Env, orNone(l.Key), err))
			continue
		}
		notes = append(notes, settingNote(l))
	}
	read := len(notes) > 0
	finish = func(cfg *config.Config) ([]string, error) {
		var more []string
		if read && !cfg.PythonCompat {
			more = append(more, compatNote)
		}
		return more, p.finish(cfg)
	}
	return notes, finish, errors.Join(errs...)
}

// compatNote is the start-up line of a configuration with the Python
// gateway's settings but not its answers.
const compatNote = "the Python gateway's settings are read, but python_compat is off: its scripts' shapes (served_by, output_text, " +
	"[DONE], detail, 401 when logged out, the auto-login answers) are not served; set POOLGATE_PYTHON_COMPAT=true for them"

func settingNote(l Setting) string {
	if l.Key == "" {
		return fmt.Sprintf("%s (Python gateway setting) read: %s", l.Env, l.What)
	}
	rename := ""
	if !strings.Contains(l.Key, "[") {
		rename = "; rename it " + config.EnvName(l.Key)
	}
	return fmt.Sprintf("%s (Python gateway setting) read as %s (%s)%s", l.Env, l.Key, l.What, rename)
}

func orNone(key string) string {
	if key == "" {
		return "none"
	}
	return key
}

// finish gives the global bundle to the only account.
func (p pending) finish(cfg *config.Config) error {
	if p.globalBundle == "" {
		return nil
	}
	if len(cfg.Accounts) != 1 {
		return fmt.Errorf("LINGMA_SESSION_BUNDLE (Python gateway setting) is one account's session, but %d accounts are configured: "+
			"put it in that account's session_bundle_plain (or import it with POST /internal/session/import?instance=NAME) and remove LINGMA_SESSION_BUNDLE", len(cfg.Accounts))
	}
	a := &cfg.Accounts[0]
	if a.SessionBundlePlain != "" || a.SessionBundle != "" || a.SessionBundleFile != "" {
		return fmt.Errorf("LINGMA_SESSION_BUNDLE (Python gateway setting) and account %s's own session bundle are both set: keep one", a.Name)
	}
	a.SessionBundlePlain = p.globalBundle
	return nil
}

// legacyAccount is one item of LINGMA_ACCOUNTS.
type legacyAccount struct {
	Name          string `json:"name"`
	Username      string `json:"username"`
	Password      string `json:"password"`
	SessionBundle string `json:"session_bundle"`
}

func parseAccounts(v string) ([]config.Account, error) {
	var items []legacyAccount
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&items); err != nil {
		return nil, fmt.Errorf(`want a JSON list of {"name", "username", "password", "session_bundle"}: %w`, err)
	}
	out := make([]config.Account, 0, len(items))
	for _, it := range items {
		out = append(out, config.Account{Name: it.Name, Username: it.Username, Password: it.Password,
			SessionBundlePlain: strings.TrimSpace(it.SessionBundle)})
	}
	return out, nil
}

// parseBool reads a boolean the way the Python gateway's settings
// did: true/false, 1/0, yes/no, on/off, in any case.
func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on", "t", "y":
		return true, nil
	case "0", "false", "no", "off", "f", "n":
		return false, nil
	}
	return false, fmt.Errorf("want true or false, got %q", v)
}

// parseList reads a comma-separated list or a JSON list of strings.
func parseList(v string) ([]string, error) {
	if s := strings.TrimSpace(v); strings.HasPrefix(s, "[") {
		var list []string
		if err := json.Unmarshal([]byte(s), &list); err != nil {
			return nil, fmt.Errorf("want a JSON list of strings: %w", err)
		}
		return list, nil
	}
	var list []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			list = append(list, s)
		}
	}
	return list, nil
}
