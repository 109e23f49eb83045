package cluster

import (
	"cmp"
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/pool/worker"
)

// RedisConfig configures the lease store. Zero fields take the defaults.
type RedisConfig struct {
	// Prefix starts every key the store writes (default "poolgate:"): the
	// session store's prefix, so one Redis namespace holds a deployment.
	Prefix string
	// Timeout bounds each lease and registry call (default 500 ms).
	Timeout time.Duration
}

// RedisClient is the part of a go-redis client the store uses; every
// redis.UniversalClient satisfies it. It should honour context deadlines
// (see internal/redisconn). Lease writes are made durable (see runDurable)
// on a *redis.Client (one server, or Sentinel's failover client) and a
// *redis.ClusterClient; on another client they are plain script calls.
type RedisClient interface {
	redis.Scripter
	ZRangeByScore(ctx context.Context, key string, opt *redis.ZRangeBy) *redis.StringSliceCmd
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
)

// RedisStore keeps the accounts' leases and the replica registry in Redis
// (lease.go, registry.go). Unlike the session store it has no local tier:
// every call goes to Redis and fails when Redis does. It is safe for
// concurrent use; it does not own the client.
type RedisStore struct {
	cfg    RedisConfig
	client RedisClient
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns the store on client.
func NewRedisStore(cfg RedisConfig, client RedisClient) *RedisStore {
	cfg.Prefix = cmp.Or(cfg.Prefix, "poolgate:")
	worker.Default(&cfg.Timeout, 500*time.Millisecond)
	return &RedisStore{cfg: cfg, client: client}
}

// redisNowMs is the scripts' prologue: the server's clock in milliseconds,
// so replicas with skewed clocks agree on expiry.
const redisNowMs = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// ErrNotReplicated is returned (wrapped) by AcquireLease and RenewLease when
// the primary has replicas and none acknowledged the lease write in time: a
// failover could promote a replica without it, so the lease does not count.
var ErrNotReplicated = redisconn.ErrNotReplicated

// runDurable runs a lease-writing script with redisconn.RunDurable: on a
// primary with replicas it waits until one of them has the write. A lease
// that only the primary knows would be lost if a replica were promoted now,
// and another replica could take the account while its holder still serves
// it (docs/cluster.md).
func (r *RedisStore) runDurable(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	return redisconn.RunDurable(ctx, r.client, script, keys, args...)
}
