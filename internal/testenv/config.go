package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
)

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
