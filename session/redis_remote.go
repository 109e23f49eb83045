package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/pool/route"
)

// Key families. Every Redis key the store touches is built by one of these.
//
// Keys a script touches together share a hash tag (the part in braces), so
// that in a Redis Cluster they live in one slot: an affinity entry with its
// shard of the expiry index, an owner's response index with its sizes. A
// prefix that holds a hash tag of its own puts every key in one slot, which
// is still correct.

// affinityShards is how many expiry indexes the affinity entries are spread
// over, so that in a Redis Cluster they spread over the primaries instead of
// all living beside one index.
const affinityShards = 16

// affinityShard is the index shard of an affinity key: FNV-1a, fixed
// forever, because it names where existing entries live.
func affinityShard(key string) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % affinityShards)
}

func (r *Redis) affinityTag(shard int) string {
	return r.cfg.Prefix + "{aff:" + strconv.Itoa(shard) + "}:"
}

func (r *Redis) entryKey(key string) string { return r.affinityTag(affinityShard(key)) + key }

// affinityIndexKey is a sorted set of the shard's affinity keys (without
// prefix) scored by expiry in Unix milliseconds; the sweeper reads it to
// report expired entries.
func (r *Redis) affinityIndexKey(shard int) string { return r.affinityTag(shard) + "idx" }

func (r *Redis) responseKey(id string) string { return r.cfg.Prefix + "resp:" + id }

// redisNowMs is the shared Lua prologue: the server's clock in milliseconds,
// so replicas with skewed clocks agree on expiry.
const redisNowMs = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// putAffinityScript stores an affinity value and indexes its expiry.
// The value itself outlives its expiry by the grace period so the sweeper can
// still read it to report the eviction. Index members whose values are
// already gone (past expiry plus grace) are pruned here, so the index stays
// bounded even when no replica sweeps. It returns the replaced value when it
// differed, so that the abandoned upstream session can be reported.
//
// KEYS[1] value, KEYS[2] index; ARGV[1] encoded value, ARGV[2] TTL ms,
// ARGV[3] grace ms, ARGV[4] index member.
var putAffinityScript = redis.NewScript(redisNowMs + `
local ttl, grace = tonumber(ARGV[2]), tonumber(ARGV[3])
local old = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl + grace)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - grace))
if old and old ~= ARGV[1] then return old end
return false
`)

// takeAffinityScript atomically gets and deletes an affinity entry, so two
// concurrent turns can never reuse one upstream session. It returns
// {expired (0|1), value}, or nil when absent.
//
// KEYS[1] value, KEYS[2] index; ARGV[1] index member.
var takeAffinityScript = redis.NewScript(redisNowMs + `
local v = redis.call('GET', KEYS[1])
local s = redis.call('ZSCORE', KEYS[2], ARGV[1])
if s then redis.call('ZREM', KEYS[2], ARGV[1]) end
if not v then return false end
redis.call('DEL', KEYS[1])
local expired = 0
if s and tonumber(s) <= now then expired = 1 end
return {expired, v}
`)

// removeAffinityScript removes the given entries, only those already expired
// when ARGV[1] is "due" (the sweeper) or all of them when it is "all" (flush,
// replay of local takes). It returns the removed values.
//
// KEYS[1] index, KEYS[2..n+1] values; ARGV[1] mode, ARGV[2..n+1] index members
// in the same order as their values.
var removeAffinityScript = redis.NewScript(redisNowMs + `
local out = {}
for i = 2, #KEYS do
  local m = ARGV[i]
  local s = redis.call('ZSCORE', KEYS[1], m)
  if ARGV[1] == 'all' or (s and tonumber(s) <= now) then
    local v = redis.call('GET', KEYS[i])
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[1], m)
    if v then out[#out + 1] = v end
  end
end
return out
`)

// removeBatch bounds the keys one removeAffinityScript call handles.
const removeBatch = 256

func encodeAffinity(a route.Affinity) string {
	b, _ := json.Marshal(a) // cannot fail: three strings
	return string(b)
}

func decodeAffinity(s string) (route.Affinity, error) {
	var a route.Affinity
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return route.Affinity{}, fmt.Errorf("decode affinity %q: %w", s, err)
	}
	return a, nil
}

// remoteErr translates redis.Nil to ErrNotFound and leaves the rest.
func remoteErr(err error) error {
	if errors.Is(err, redis.Nil) {
		return ErrNotFound
	}
	return err
}

func (r *Redis) putRemote(ctx context.Context, key string, a route.Affinity) (old *route.Affinity, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AffinityTimeout)
	defer cancel()
	res, err := putAffinityScript.Run(ctx, r.client,
		[]string{r.entryKey(key), r.affinityIndexKey(affinityShard(key))},
		encodeAffinity(a), r.cfg.Memory.AffinityTTL.Milliseconds(), r.cfg.EvictGrace.Milliseconds(), key).Text()
	if err = remoteErr(err); err != nil {
		if errors.Is(err, ErrNotFound) {
			return nil, nil // nothing replaced
		}
		return nil, err
	}
	prev, err := decodeAffinity(res)
	if err != nil {
		return nil, nil // an unreadable old value has nothing to report
	}
	return &prev, nil
}

func (r *Redis) takeRemote(ctx context.Context, key string) (a route.Affinity, expired bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AffinityTimeout)
	defer cancel()
	res, err := takeAffinityScript.Run(ctx, r.client,
		[]string{r.entryKey(key), r.affinityIndexKey(affinityShard(key))}, key).Slice()
	if err != nil {
		return route.Affinity{}, false, remoteErr(err)
	}
	if len(res) != 2 {
		return route.Affinity{}, false, fmt.Errorf("take affinity %s: unexpected reply %v", key, res)
	}
	flag, _ := res[0].(int64)
	val, _ := res[1].(string)
	a, err = decodeAffinity(val)
	if err != nil {
		// A value we cannot read is as good as absent; it is gone now.
		return route.Affinity{}, false, ErrNotFound
	}
	return a, flag == 1, nil
}

// removeRemote runs removeAffinityScript over members, one batch of one
// index shard at a time, and returns the values it removed.
func (r *Redis) removeRemote(ctx context.Context, mode string, members []string) ([]route.Affinity, error) {
	var byShard [affinityShards][]string
	for _, m := range members {
		sh := affinityShard(m)
		byShard[sh] = append(byShard[sh], m)
	}
	var removed []route.Affinity
	for sh, members := range byShard {
		for len(members) > 0 {
			batch := members[:min(removeBatch, len(members))]
			members = members[len(batch):]
			vals, err := r.removeBatch(ctx, mode, sh, batch)
			if err != nil {
				return removed, err
			}
			removed = append(removed, vals...)
		}
	}
	return removed, nil
}

func (r *Redis) removeBatch(ctx context.Context, mode string, shard int, batch []string) ([]route.Affinity, error) {
	keys := make([]string, 0, len(batch)+1)
	args := make([]any, 0, len(batch)+1)
	keys = append(keys, r.affinityIndexKey(shard))
	args = append(args, mode)
	for _, m := range batch {
		keys = append(keys, r.entryKey(m))
		args = append(args, m)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	vals, err := removeAffinityScript.Run(ctx, r.client, keys, args...).StringSlice()
	if err != nil {
		return nil, err
	}
	var removed []route.Affinity
	for _, v := range vals {
		if a, err := decodeAffinity(v); err == nil {
			removed = append(removed, a)
		}
	}
	return removed, nil
}

// indexMembers lists affinity index members of every shard: those due by
// the local clock (the script re-checks against the server's) when due is
// true, else all. The shards are read in one pipeline.
func (r *Redis) indexMembers(ctx context.Context, due bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	by := &redis.ZRangeBy{Min: "-inf", Max: "+inf"}
	if due {
		// One sweep handles a bounded batch per shard; the next tick takes
		// the rest.
		by.Max, by.Count = strconv.FormatInt(r.cfg.Memory.Now().UnixMilli(), 10), removeBatch
	}
	cmds := make([]*redis.StringSliceCmd, affinityShards)
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for sh := range affinityShards {
			cmds[sh] = p.ZRangeByScore(ctx, r.affinityIndexKey(sh), by)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	return out, nil
}

// responseIndexKey orders an owner's responses by save time;
// responseSizesKey holds their sizes and, under the field bytesField, their
// total. Both live as long as the owner's newest response.
func (r *Redis) responseIndexKey(owner string) string {
	return r.cfg.Prefix + "{respq:" + owner + "}:idx"
}
func (r *Redis) responseSizesKey(owner string) string {
	return r.cfg.Prefix + "{respq:" + owner + "}:sz"
}

// quotaScript records a saved response in its owner's index and enforces
// the owner's quota: while the owner keeps more responses or bytes than
// allowed, its oldest are unindexed. It returns their ids; the caller
// deletes them (their keys live in other slots of a cluster).
//
// KEYS[1] owner index, KEYS[2] owner sizes; ARGV[1] size, ARGV[2] ttl ms,
// ARGV[3] id, ARGV[4] max count, ARGV[5] max bytes.
var quotaScript = redis.NewScript(redisNowMs + `
local size, ttl, id = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local old = tonumber(redis.call('HGET', KEYS[2], id) or '0')
redis.call('HSET', KEYS[2], id, size)
local total = redis.call('HINCRBY', KEYS[2], '` + bytesField + `', size - old)
redis.call('ZADD', KEYS[1], now, id)
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
local evicted = {}
while redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[4]) or total > tonumber(ARGV[5]) do
  local v = redis.call('ZPOPMIN', KEYS[1])
  if #v == 0 then break end
  if v[1] == id then
    redis.call('ZADD', KEYS[1], now, id) -- alone over the byte cap: it stays
    break
  end
  local sz = tonumber(redis.call('HGET', KEYS[2], v[1]) or '0')
  redis.call('HDEL', KEYS[2], v[1])
  total = redis.call('HINCRBY', KEYS[2], '` + bytesField + `', -sz)
  evicted[#evicted + 1] = v[1]
end
return evicted
`)

// bytesField is the owner-sizes field holding the total; it cannot be an id.
const bytesField = "#total"

// saveRemote stores a response and extends the life of the responses it
// builds on (one pipeline: in a cluster their keys spread over the
// primaries), then counts it against the owner's quota and deletes what the
// quota evicted. A crash between the two steps leaves a response that is not
// counted, which its TTL removes.
func (r *Redis) saveRemote(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep []string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.responseKey(id), data, ttl)
		for _, k := range keep {
			p.PExpire(ctx, r.responseKey(k), ttl)
		}
		return nil
	})
	if err != nil {
		return err
	}
	evicted, err := quotaScript.Run(ctx, r.client, []string{r.responseIndexKey(owner), r.responseSizesKey(owner)},
		len(data), ttl.Milliseconds(), id, r.cfg.OwnerMaxResponses, r.cfg.OwnerMaxResponseBytes).StringSlice()
	if err != nil || len(evicted) == 0 {
		return err
	}
	_, err = r.deleteRemote(ctx, evicted...)
	for _, e := range evicted {
		_, _ = r.local.deleteResponse(e)
	}
	return err
}

func (r *Redis) loadRemote(ctx context.Context, id string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	b, err := r.client.Get(ctx, r.responseKey(id)).Bytes()
	return b, remoteErr(err)
}

// loadManyRemote reads several responses in one pipeline of GETs (not an
// MGET, whose keys would have to share a slot); a missing one is nil.
func (r *Redis) loadManyRemote(ctx context.Context, ids []string) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, r.responseKey(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]any, len(ids))
	for i, c := range cmds {
		if v, err := c.Result(); err == nil {
			out[i] = v
		} else if !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	return out, nil
}

// deleteRemote deletes responses, one DEL each in one pipeline, and returns
// how many existed.
func (r *Redis) deleteRemote(ctx context.Context, ids ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(ids))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Del(ctx, r.responseKey(id))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}
