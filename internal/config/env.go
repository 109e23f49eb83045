package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EnvName returns the environment variable for a key; a section's key
// (section.some_key) is POOLGATE_SECTION_SOME_KEY, and a dash in a
// section's name (claude-code) is an underscore there, as a shell names
// variables.
func EnvName(key string) string {
	return envPrefix + strings.ToUpper(envKey.Replace(key))
}

var envKey = strings.NewReplacer(".", "_", "-", "_")

func applyEnv(cfg *Config, environ []string) ([]string, error) {
	v := cfg.view()
	defer cfg.store(v)
	byEnv := envFields()
	var warnings []string
	var errs []error
	for _, kv := range environ {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(k, envPrefix) {
			continue
		}
		path, known := byEnv[k]
		if !known {
			if !ignoredEnv[k] {
				warnings = append(warnings, fmt.Sprintf("unknown environment variable %s ignored%s", k, suggest(k, byEnv)))
			}
			continue
		}
		if err := setField(v.FieldByIndex(path), val); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k, err))
		}
	}
	sort.Strings(warnings)
	return warnings, errors.Join(errs...)
}

// ignoredEnv are POOLGATE_ variables read by other tools, not the daemon.
var ignoredEnv = map[string]bool{"POOLGATE_TEST_SIMWORKER": true}

func setField(f reflect.Value, val string) error {
	switch f.Interface().(type) {
	case APIKeys:
		var k APIKeys
		if err := k.ParseEnv(val); err != nil {
			return err
		}
		f.Set(reflect.ValueOf(k))
	case string:
		f.SetString(val)
	case bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", val)
		}
		f.SetBool(b)
	case int, int64:
		n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", val)
		}
		f.SetInt(n)
	case time.Duration:
		d, err := ParseDuration(val)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
	case []string:
		var list []string
		for _, s := range strings.Split(val, ",") {
			if s = strings.TrimSpace(s); s != "" {
				list = append(list, s)
			}
		}
		f.Set(reflect.ValueOf(list))
	default: // accounts, aliases: JSON
		dec := json.NewDecoder(strings.NewReader(val))
		dec.DisallowUnknownFields()
		p := reflect.New(f.Type())
		if err := dec.Decode(p.Interface()); err != nil {
			return fmt.Errorf("want JSON: %w", err)
		}
		f.Set(p.Elem())
	}
	return nil
}

// suggest names the closest known variable, if one is close.
func suggest(k string, known map[string][]int) string {
	best, bestD := "", 4
	for name := range known {
		if d := levenshtein(k, name); d < bestD || (d == bestD && name < best) {
			best, bestD = name, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ParseDuration reads a duration: Go's form (90s, 30m, 1h30m), or a bare
// number of seconds (1800, 2.5), the unit of the Python gateway's settings.
func ParseDuration(v string) (time.Duration, error) {
	s := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > float64(1<<63-1)/float64(time.Second) {
			return 0, fmt.Errorf("want a duration like 30s or a number of seconds, got %q", v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want a duration like 30s or a number of seconds, got %q", v)
	}
	return d, nil
}
