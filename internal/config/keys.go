package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// APIKey is one key of the public API: a name (what logs, metrics, usage
// and the dashboard show; the key itself never is) and its limits.
type APIKey struct {
	Name string `yaml:"name" json:"name"`
	// Key is the secret; KeyEnv or KeyFile may supply it instead.
	Key     string `yaml:"key" json:"key"`
	KeyEnv  string `yaml:"key_env" json:"key_env"`
	KeyFile string `yaml:"key_file" json:"key_file"`
	// Role is what the key may do besides the API: user (the default: the
	// API, and its own usage and request log), viewer (also reads the
	// admin API: pool, cluster, everyone's usage and log without prompts)
	// or admin (the whole admin API).
	Role string `yaml:"role" json:"role"`
	// RPM, Concurrency and TokensPerDay limit the key across every replica
	// (0: no limit): requests per minute, requests at once, and input plus
	// output tokens per UTC day.
	RPM          int   `yaml:"rpm" json:"rpm"`
	Concurrency  int   `yaml:"concurrency" json:"concurrency"`
	TokensPerDay int64 `yaml:"tokens_per_day" json:"tokens_per_day"`
}

// APIKeys is the api_keys setting: a list whose items are a bare key or a
// named key with limits. In the environment it is a comma-separated list
// of bare keys, or the same list as JSON.
type APIKeys []APIKey

// UnmarshalYAML reads a list of bare keys and mappings.
func (k *APIKeys) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: api_keys is a list", n.Line)
	}
	out := make(APIKeys, 0, len(n.Content))
	for _, item := range n.Content {
		switch item.Kind {
		case yaml.ScalarNode:
			out = append(out, APIKey{Key: item.Value})
		case yaml.MappingNode:
			var key APIKey
			dec := strictNode(item)
			if err := dec(&key); err != nil {
				return err
			}
			out = append(out, key)
		default:
			return fmt.Errorf("line %d: an api_keys item is a key or a mapping {name, key, ...}", item.Line)
		}
	}
	*k = out
	return nil
}

// strictNode decodes a mapping node refusing unknown fields (the decoder's
// KnownFields does not reach custom unmarshalers).
func strictNode(n *yaml.Node) func(v any) error {
	return func(v any) error {
		b, err := yaml.Marshal(n)
		if err != nil {
			return err
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("line %d: api_keys item: %w", n.Line, err)
		}
		return nil
	}
}

// UnmarshalJSON reads a list of bare keys and objects.
func (k *APIKeys) UnmarshalJSON(b []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return errors.New("api_keys is a JSON list of keys or {name, key, ...} objects")
	}
	out := make(APIKeys, 0, len(items))
	for i, raw := range items {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			out = append(out, APIKey{Key: s})
			continue
		}
		var key APIKey
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&key); err != nil {
			// Never the item itself: it holds the secret.
			return fmt.Errorf("api_keys item %d: %w", i+1, err)
		}
		out = append(out, key)
	}
	*k = out
	return nil
}

// ParseEnv reads POOLGATE_API_KEYS.
func (k *APIKeys) ParseEnv(val string) error {
	if v := strings.TrimSpace(val); strings.HasPrefix(v, "[") {
		return k.UnmarshalJSON([]byte(v))
	}
	var out APIKeys
	for _, s := range strings.Split(val, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, APIKey{Key: s})
		}
	}
	*k = out
	return nil
}

// Secrets returns the keys' secrets, in order.
func (k APIKeys) Secrets() []string {
	out := make([]string, len(k))
	for i := range k {
		out[i] = k[i].Key
	}
	return out
}

// keyName is what a key's name may be: it shows in metric labels, logs and
// Redis keys.
var keyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// resolveKeys fills secrets from key_env / key_file and names bare keys
// key-1, key-2, ... by their place in the list.
func (c *Config) resolveKeys(env map[string]string) error {
	var errs []error
	for i := range c.APIKeys {
		k := &c.APIKeys[i]
		if k.Name == "" {
			k.Name = "key-" + strconv.Itoa(i+1)
		}
		var err error
		if k.Key, err = secret("api key "+k.Name+": key", k.Key, k.KeyEnv, k.KeyFile, env, strings.TrimSpace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AdminKeys reports whether any key has role admin.
func (k APIKeys) AdminKeys() bool {
	for i := range k {
		if k[i].Role == "admin" {
			return true
		}
	}
	return false
}

// validateKeys checks names, secrets, roles and limits.
func (c *Config) validateKeys() []error {
	var errs []error
	names, secrets := map[string]bool{}, map[string]string{}
	for _, k := range c.APIKeys {
		switch {
		case !keyName.MatchString(k.Name):
			errs = append(errs, fmt.Errorf("api key name %q: up to 64 letters, digits, '.', '_', '@' or '-'", k.Name))
		case names[k.Name]:
			errs = append(errs, fmt.Errorf("api key name %q is used twice", k.Name))
		}
		names[k.Name] = true
		switch {
		case k.Key == "":
			errs = append(errs, fmt.Errorf("api key %s has no key (key, key_env or key_file)", k.Name))
		case secrets[k.Key] != "":
			errs = append(errs, fmt.Errorf("api keys %s and %s are the same key", secrets[k.Key], k.Name))
		default:
			secrets[k.Key] = k.Name
		}
		switch k.Role {
		case "", "user", "viewer", "admin":
		default:
			errs = append(errs, fmt.Errorf("api key %s: role %q: use user, viewer or admin", k.Name, k.Role))
		}
		if k.RPM < 0 || k.Concurrency < 0 || k.TokensPerDay < 0 {
			errs = append(errs, fmt.Errorf("api key %s: limits must be >= 0", k.Name))
		}
	}
	return errs
}
