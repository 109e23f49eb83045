package testenv

import (
	"reflect"
	"sort"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/redisconn"
)

// ConfigKeys returns every configuration key (the yaml names of
// config.Config's fields), sorted: for the tests that hold the docs and the
// examples to the settings the daemon reads.
func ConfigKeys() []string {
	t := reflect.TypeFor[config.Config]()
	keys := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		keys = append(keys, t.Field(i).Tag.Get("yaml"))
	}
	sort.Strings(keys)
	return keys
}

// Dial connects to the Redis at url (in mode's form) the way the daemon
// connects, and closes the client when the test ends: for the stores under
// test. Closing it twice (a store's Close, then the cleanup) is harmless.
func Dial(t testing.TB, mode, url string) redis.UniversalClient {
	t.Helper()
	c, err := redisconn.Dial(redisconn.Config{Mode: redisconn.Mode(mode), URL: url})
	if err != nil {
		t.Fatalf("dial %s redis %s: %v", mode, url, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
