// Package redisconn owns how poolgate connects to Redis: one go-redis client
// set up the way its stores rely on (deadlines from the callers' contexts,
// failing fast when the server is gone), shared by the session store, the
// bundle store, the accounting stores and the cluster's lease store. It
// speaks to one server, to a Sentinel-managed primary, or to a Redis
// Cluster, and hands every store the same redis.UniversalClient. Conn adds
// what the stores that fall back to an in-process copy share: a key prefix
// and whether Redis is reachable, so an outage is noticed and logged once.
// It holds no data; each store names its own keys.
package redisconn

import (
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Mode is how poolgate reaches Redis.
type Mode string

// The modes, as redis_mode spells them.
const (
	// Single is one server (or a proxy in front of several), redis_url in
	// redis.ParseURL's form.
	Single Mode = "single"
	// Sentinel is a primary with replicas watched by Redis Sentinel, which
	// promotes a replica when the primary fails; redis_url names the
	// sentinels in redis.ParseFailoverURL's form.
	Sentinel Mode = "sentinel"
	// Cluster is a Redis Cluster; redis_url names seed nodes in
	// redis.ParseClusterURL's form.
	Cluster Mode = "cluster"
)

// Config says how to reach Redis.
type Config struct {
	// Mode is how Redis is deployed (empty: Single).
	Mode Mode
	// URL is redis_url, in Mode's form; its user info holds the user name
	// and password (of the sentinels, in Sentinel mode, whose primary's are
	// its username= and password= parameters), and rediss:// asks for TLS.
	URL string
	// PasswordFile, when set, holds the password of the servers that keep
	// the data (the one server, Sentinel's primary and replicas, every
	// Cluster node), in place of the URL's, and of the sentinels unless the
	// URL's user info names theirs: the secret stays out of the URL, the
	// environment and the process list. A final line break is not part of
	// it.
	PasswordFile string
	// CAFile, when set, holds the PEM certificates that verify the servers'
	// TLS certificates (rediss://), in place of the system's roots.
	CAFile string
	// DialTimeout bounds one connection attempt (default 1s).
	DialTimeout time.Duration
}

// Check parses the URL for its mode and reads the password and CA files
// without connecting, so a bad setting is found at start with an error
// that says what each mode expects. No error shows a secret.
func Check(cfg Config) error {
	_, err := options(cfg)
	return err
}

// Dial returns a client for cfg.URL in cfg.Mode's form (see Mode). It
// connects lazily: an unreachable server is not an error here.
//
// Every mode gets the same behaviour: per-call contexts carry the deadlines
// (without ContextTimeoutEnabled go-redis would use its own 3 s read
// timeout), and a server that is gone fails fast: one immediate retry (for a
// pooled connection that died with a restart, or a cluster redirect after a
// failover) and one dial attempt, instead of go-redis's backoffs that would
// spend the whole deadline on a refused port. The stores do their own
// backing off.
func Dial(cfg Config) (redis.UniversalClient, error) {
	o, err := options(cfg)
	if err != nil {
		return nil, err
	}
	dialTimeout := cfg.DialTimeout
	if dialTimeout <= 0 {
		dialTimeout = time.Second
	}
	switch o := o.(type) {
	case *redis.Options:
		o.ContextTimeoutEnabled, o.DialTimeout, o.DisableIdentity = true, dialTimeout, true
		o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 1, -1, -1
		o.DialerRetries, o.DialerRetryTimeout = 1, time.Millisecond
		return redis.NewClient(o), nil
	case *redis.FailoverOptions:
		o.ContextTimeoutEnabled, o.DialTimeout, o.DisableIdentity = true, dialTimeout, true
		o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 1, -1, -1
		o.DialerRetries, o.DialerRetryTimeout = 1, time.Millisecond
		return redis.NewFailoverClient(o), nil
	case *redis.ClusterOptions:
		o.ContextTimeoutEnabled, o.DialTimeout, o.DisableIdentity = true, dialTimeout, true
		o.MaxRetries, o.MinRetryBackoff, o.MaxRetryBackoff = 1, -1, -1
		o.DialerRetries, o.DialerRetryTimeout = 1, time.Millisecond
		// go-redis re-reads the slot map on a redirect but not when a
		// primary stops answering, and by default only every minute: after a
		// failover the client would keep dialing the dead primary. A
		// command run more than a second after the last reload starts one
		// (CLUSTER SLOTS, in the background).
		if o.ClusterStateReloadInterval <= 0 || o.ClusterStateReloadInterval > time.Second {
			o.ClusterStateReloadInterval = time.Second
		}
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("redis_mode %q: no client for it", cfg.Mode)
}

// Beside returns a key named key+suffix that a Redis Cluster keeps in key's
// hash slot, so that one script may touch both: key's own hash tag when it
// has one, else key in braces (a key without a tag is slotted by its whole
// name). It reports false when key has a '}' but no tag: then no other name
// shares its slot.
func Beside(key, suffix string) (string, bool) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + suffix, true
		}
	}
	if strings.ContainsRune(key, '}') {
		return key + suffix, false
	}
	return "{" + key + "}" + suffix, true
}
