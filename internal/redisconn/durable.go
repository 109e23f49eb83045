package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is returned (wrapped) by RunDurable when the primary has
// replicas and none acknowledged the write in time: a failover could
// promote a replica without it, so the write must not count as done.
var ErrNotReplicated = errors.New("write not acknowledged by a replica")

// RunDurable runs a writing script on the primary that serves keys[0] and
// then, when that primary has replicas, WAITs until one of them has every
// write made before the WAIT on the same connection (script and WAIT go in
// one pipeline, which go-redis sends over one connection). Replication is
// asynchronous: a write only the primary knows is lost if a replica is
// promoted now. Sentinel promotes the replica with the most replicated data,
// so one acknowledgement is enough when the primary has one replica, and the
// usual case with more. A primary without replicas has nothing to fail over
// to and is not waited on. It handles a *redis.Client (one server, or
// Sentinel's failover client) and a *redis.ClusterClient; on another client
// it is a plain script call. A write the WAIT did not confirm may still be
// on the primary: only idempotent scripts may be retried after it.
func RunDurable(ctx context.Context, client redis.Scripter, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	var node *redis.Client
	switch c := client.(type) {
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
		return script.Run(ctx, client, keys, args...)
	}
	cmd := runAndWait(ctx, node, script, keys, args)
	if c, ok := client.(*redis.ClusterClient); ok && cmd.Err() != nil && !errors.Is(cmd.Err(), redis.Nil) {
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
