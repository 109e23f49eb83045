package cluster

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
	if cfg.Prefix == "" {
		cfg.Prefix = "poolgate:"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
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
var ErrNotReplicated = errors.New("lease write not acknowledged by a replica")

// runDurable runs a lease-writing script on the primary that serves
// keys[0] and then, when that primary has replicas, WAITs until one of them
// has every write made before the WAIT on the same connection (script and
// WAIT go in one pipeline, which go-redis sends over one connection).
// Replication is asynchronous: a lease that only the primary knows would be
// lost if a replica were promoted now, and another replica could take the
// account while its holder still serves it. Sentinel promotes the replica
// with the most replicated data, so one acknowledgement is enough when the
// primary has one replica, and the usual case with more (docs/cluster.md).
// A primary without replicas has nothing to fail over to and is not waited
// on.
func (r *RedisStore) runDurable(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var node *redis.Client
	switch c := r.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, keys[0]); err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
	default:
		return script.Run(ctx, r.client, keys, args...)
	}
	cmd := runAndWait(ctx, node, script, keys, args)
	if c, ok := r.client.(*redis.ClusterClient); ok && cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
		c.ReloadState(ctx) // the slot's primary may have moved
	}
	return cmd
}

// runAndWait runs script on node and, if node has replicas, waits within
// ctx for one to acknowledge it.
func runAndWait(ctx context.Context, node *redis.Client, script *redis.Script, keys []string, args []any) *redis.Cmd {
	info, err := node.Info(ctx, "replication").Result()
	if err != nil {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("replication info: %w", err))
		return cmd
	}
	if connectedReplicas(info) == 0 {
		return script.Run(ctx, node, keys, args...)
	}
	wait := 200 * time.Millisecond
	if dl, ok := ctx.Deadline(); ok {
		// Leave the reply time to come back before the call's deadline.
		left := time.Until(dl)
		wait = max(min(left-left/4, left-50*time.Millisecond), time.Millisecond)
	}
	cmd, acked := pipelineWithWait(ctx, node, script, keys, args, wait)
	n, err := acked.Int64()
	switch {
	case cmd.Err() != nil:
	case err != nil:
		cmd.SetErr(fmt.Errorf("wait for a replica: %w", err))
	case n < 1:
		cmd.SetErr(fmt.Errorf("%w within %s", ErrNotReplicated, wait))
	}
	return cmd
}

// pipelineWithWait sends the script and a WAIT for one replica in one
// pipeline. The script goes whole (EVAL), not by hash: a NOSCRIPT answer
// would come with the WAIT already spent.
func pipelineWithWait(ctx context.Context, node *redis.Client, script *redis.Script, keys []string, args []any, wait time.Duration) (cmd, acked *redis.Cmd) {
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = script.Eval(ctx, p, keys, args...)
		acked = p.Do(ctx, "WAIT", 1, max(wait.Milliseconds(), 1))
		return nil
	})
	return cmd, acked
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(info string) int {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
