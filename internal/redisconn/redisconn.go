// Package redisconn owns how poolgate connects to Redis: one go-redis client
// set up the way its stores rely on (deadlines from the callers' contexts,
// failing fast when the server is gone), shared by the session store and the
// cluster's lease store. It holds no data and knows no key.
package redisconn

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dial returns a client for the server at url, as
// redis://[[user]:password@]host:port[/db] (rediss:// for TLS). It connects
// lazily: an unreachable server is not an error here. dialTimeout bounds one
// connection attempt (default 1s).
func Dial(url string, dialTimeout time.Duration) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	if dialTimeout <= 0 {
		dialTimeout = time.Second
	}
	// Per-call contexts carry the deadlines; without this go-redis would use
	// its own 3 s read timeout instead.
	opts.ContextTimeoutEnabled = true
	opts.DialTimeout = dialTimeout
	// Fail fast when the server is gone: one immediate retry (for a pooled
	// connection that died with a restart) and one dial attempt, instead of
	// go-redis's backoffs that would spend the whole deadline on a refused
	// port. The stores do their own backing off.
	opts.MaxRetries = 1
	opts.MinRetryBackoff, opts.MaxRetryBackoff = -1, -1
	opts.DialerRetries = 1
	opts.DialerRetryTimeout = time.Millisecond
	opts.DisableIdentity = true
	return redis.NewClient(opts), nil
}
