package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/chat"
)

// Replica is one poolgate replica as its last heartbeat described it.
type Replica struct {
	// ID names the replica; unique in the cluster.
	ID string `json:"id"`
	// URL is the replica's internal address other replicas forward to.
	URL string `json:"url"`
	// Accounts are the accounts whose leases the replica holds.
	Accounts []string `json:"accounts"`
	// InFlight, Capacity and Queue describe the replica's load.
	InFlight int `json:"in_flight"`
	Capacity int `json:"capacity"`
	Queue    int `json:"queue"`
	// MaxAccounts is the replica's own cap on the accounts it holds (0: its
	// fair share): the others do not wait for it to reach a floor above it.
	MaxAccounts int `json:"max_accounts,omitempty"`
	// Models are the models its accounts list, each with the kinds that
	// serve it, and Serving the ids of those its ready instances serve:
	// every replica lists the pool's models, and a turn for a model none
	// of its own accounts serves goes to a replica whose do.
	Models  []chat.Model `json:"models,omitempty"`
	Serving []string     `json:"serving,omitempty"`
	// Seen is when the heartbeat was sent, by the sender's wall clock; for
	// display only (liveness is the key's expiry in Redis).
	Seen time.Time `json:"seen"`
}

// Key families of the replica registry.
func (r *RedisStore) replicaKey(id string) string { return r.tableKey("replica:" + id) }

// replicaIndexKey is a sorted set of replica ids scored by the expiry of
// their heartbeat in server Unix milliseconds.
func (r *RedisStore) replicaIndexKey() string { return r.tableKey("replicas") }

// heartbeatScript stores a replica's record with its expiry, indexes it, and
// prunes index entries whose heartbeat expired, so the index stays bounded.
//
// KEYS[1] record, KEYS[2] index; ARGV[1] JSON, ARGV[2] ttl ms, ARGV[3] id.
var heartbeatScript = redis.NewScript(allowOOM + redisNowMs + `
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. now)
return 1
`)

// replicasScript returns the records of the given replicas that are still
// live and drops the others from the index.
//
// KEYS[1] index, KEYS[2..n+1] records; ARGV[1..n] ids in the same order.
var replicasScript = redis.NewScript(`
local out = {}
for i = 2, #KEYS do
  local v = redis.call('GET', KEYS[i])
  if v then
    out[#out + 1] = v
  else
    redis.call('ZREM', KEYS[1], ARGV[i - 1])
  end
end
return out
`)

// leaveScript removes a replica's record and index entry.
//
// KEYS[1] record, KEYS[2] index; ARGV[1] id.
var leaveScript = redis.NewScript(allowOOM + `
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// Heartbeat registers rep as live for ttl (stamping Seen with the local clock
// when it is zero). Replicas renew it well within ttl; a replica that stops
// disappears from Replicas when it runs out.
func (r *RedisStore) Heartbeat(ctx context.Context, rep Replica, ttl time.Duration) error {
	switch {
	case rep.ID == "":
		return errors.New("heartbeat: empty replica id")
	case ttl < time.Millisecond:
		return fmt.Errorf("heartbeat %s: ttl %v under 1ms", rep.ID, ttl)
	}
	if rep.Seen.IsZero() {
		rep.Seen = time.Now()
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", rep.ID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	err = heartbeatScript.Run(ctx, r.client,
		[]string{r.replicaKey(rep.ID), r.replicaIndexKey()}, b, ttl.Milliseconds(), rep.ID).Err()
	if err != nil {
		return fmt.Errorf("heartbeat %s: %w", rep.ID, err)
	}
	return nil
}

// Replicas returns the live replicas sorted by ID, and prunes expired ones
// from the index. It takes two round trips, both within one RedisConfig.Timeout.
func (r *RedisStore) Replicas(ctx context.Context) ([]Replica, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	ids, err := r.client.ZRangeByScore(ctx, r.replicaIndexKey(), &redis.ZRangeBy{Min: "-inf", Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, len(ids)+1)
	args := make([]any, len(ids))
	keys = append(keys, r.replicaIndexKey())
	for i, id := range ids {
		keys = append(keys, r.replicaKey(id))
		args[i] = id
	}
	vals, err := replicasScript.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	out := make([]Replica, 0, len(vals))
	for _, v := range vals {
		var rep Replica
		if err := json.Unmarshal([]byte(v), &rep); err != nil {
			return nil, fmt.Errorf("list replicas: decode %q: %w", v, err)
		}
		out = append(out, rep)
	}
	slices.SortFunc(out, func(a, b Replica) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// LeaveCluster removes replica id from the registry at once, for a clean
// shutdown; the others see it gone without waiting for its heartbeat to
// expire.
func (r *RedisStore) LeaveCluster(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	err := leaveScript.Run(ctx, r.client, []string{r.replicaKey(id), r.replicaIndexKey()}, id).Err()
	if err != nil {
		return fmt.Errorf("leave cluster %s: %w", id, err)
	}
	return nil
}
