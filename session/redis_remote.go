package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Key families. Every Redis key the store touches is built by one of these.
func (r *Redis) affinityKey(key string) string { return r.cfg.Prefix + "aff:" + key }

// affinityIndexKey is a sorted set of affinity keys (without prefix) scored by
// expiry in Unix milliseconds; the sweeper reads it to report expired entries.
func (r *Redis) affinityIndexKey() string { return r.cfg.Prefix + "affidx" }

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

func encodeAffinity(a Affinity) string {
	b, _ := json.Marshal(a) // cannot fail: three strings
	return string(b)
}

func decodeAffinity(s string) (Affinity, error) {
	var a Affinity
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return Affinity{}, fmt.Errorf("decode affinity %q: %w", s, err)
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

func (r *Redis) putRemote(ctx context.Context, key string, a Affinity) (old *Affinity, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AffinityTimeout)
	defer cancel()
	res, err := putAffinityScript.Run(ctx, r.client,
		[]string{r.affinityKey(key), r.affinityIndexKey()},
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

func (r *Redis) takeRemote(ctx context.Context, key string) (a Affinity, expired bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AffinityTimeout)
	defer cancel()
	res, err := takeAffinityScript.Run(ctx, r.client,
		[]string{r.affinityKey(key), r.affinityIndexKey()}, key).Slice()
	if err != nil {
		return Affinity{}, false, remoteErr(err)
	}
	if len(res) != 2 {
		return Affinity{}, false, fmt.Errorf("take affinity %s: unexpected reply %v", key, res)
	}
	flag, _ := res[0].(int64)
	val, _ := res[1].(string)
	a, err = decodeAffinity(val)
	if err != nil {
		// A value we cannot read is as good as absent; it is gone now.
		return Affinity{}, false, ErrNotFound
	}
	return a, flag == 1, nil
}

// removeRemote runs removeAffinityScript over members in batches and returns
// the values it removed.
func (r *Redis) removeRemote(ctx context.Context, mode string, members []string) ([]Affinity, error) {
	var removed []Affinity
	for len(members) > 0 {
		batch := members[:min(removeBatch, len(members))]
		members = members[len(batch):]
		keys := make([]string, 0, len(batch)+1)
		args := make([]any, 0, len(batch)+1)
		keys = append(keys, r.affinityIndexKey())
		args = append(args, mode)
		for _, m := range batch {
			keys = append(keys, r.affinityKey(m))
			args = append(args, m)
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
		vals, err := removeAffinityScript.Run(cctx, r.client, keys, args...).StringSlice()
		cancel()
		if err != nil {
			return removed, err
		}
		for _, v := range vals {
			if a, err := decodeAffinity(v); err == nil {
				removed = append(removed, a)
			}
		}
	}
	return removed, nil
}

// indexMembers lists affinity index members: those due by the local clock
// (the script re-checks against the server's) when due is true, else all.
func (r *Redis) indexMembers(ctx context.Context, due bool) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	by := &redis.ZRangeBy{Min: "-inf", Max: "+inf"}
	if due {
		// One sweep handles a bounded batch; the next tick takes the rest.
		by.Max, by.Count = strconv.FormatInt(r.cfg.Memory.Now().UnixMilli(), 10), 4*removeBatch
	}
	return r.client.ZRangeByScore(ctx, r.affinityIndexKey(), by).Result()
}

// responseIndexKey orders an owner's responses by save time;
// responseSizesKey holds their sizes and, under the field bytesField, their
// total. Both live as long as the owner's newest response.
func (r *Redis) responseIndexKey(owner string) string { return r.cfg.Prefix + "respidx:" + owner }
func (r *Redis) responseSizesKey(owner string) string { return r.cfg.Prefix + "respsz:" + owner }

// saveResponseScript stores a response, extends the life of the responses
// it builds on, and enforces the owner's quota: while the owner keeps more
// responses or bytes than allowed, its oldest are unindexed. It returns
// their ids; the caller deletes them (keys the script may not name).
//
// KEYS[1] response, KEYS[2] owner index, KEYS[3] owner sizes, KEYS[4..]
// responses to keep; ARGV[1] data, ARGV[2] ttl ms, ARGV[3] id, ARGV[4] max
// count, ARGV[5] max bytes.
var saveResponseScript = redis.NewScript(redisNowMs + `
local ttl, id, size = tonumber(ARGV[2]), ARGV[3], string.len(ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ttl) end
local old = tonumber(redis.call('HGET', KEYS[3], id) or '0')
redis.call('HSET', KEYS[3], id, size)
local total = redis.call('HINCRBY', KEYS[3], '` + bytesField + `', size - old)
redis.call('ZADD', KEYS[2], now, id)
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
local evicted = {}
while redis.call('ZCARD', KEYS[2]) > tonumber(ARGV[4]) or total > tonumber(ARGV[5]) do
  local v = redis.call('ZPOPMIN', KEYS[2])
  if #v == 0 then break end
  if v[1] == id then
    redis.call('ZADD', KEYS[2], now, id) -- alone over the byte cap: it stays
    break
  end
  local sz = tonumber(redis.call('HGET', KEYS[3], v[1]) or '0')
  redis.call('HDEL', KEYS[3], v[1])
  total = redis.call('HINCRBY', KEYS[3], '` + bytesField + `', -sz)
  evicted[#evicted + 1] = v[1]
end
return evicted
`)

// bytesField is the owner-sizes field holding the total; it cannot be an id.
const bytesField = "#total"

func (r *Redis) saveRemote(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep []string) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	keys := make([]string, 0, 3+len(keep))
	keys = append(keys, r.responseKey(id), r.responseIndexKey(owner), r.responseSizesKey(owner))
	for _, k := range keep {
		keys = append(keys, r.responseKey(k))
	}
	evicted, err := saveResponseScript.Run(ctx, r.client, keys, data, ttl.Milliseconds(), id,
		r.cfg.OwnerMaxResponses, r.cfg.OwnerMaxResponseBytes).StringSlice()
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

func (r *Redis) loadManyRemote(ctx context.Context, ids []string) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.responseKey(id)
	}
	return r.client.MGet(ctx, keys...).Result()
}

func (r *Redis) deleteRemote(ctx context.Context, ids ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = r.responseKey(id)
	}
	return r.client.Del(ctx, keys...).Result()
}
