package session

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/pool/route"
)

// writeBackScript writes affinity entries put on one replica while Redis was
// away, each unless Redis holds a newer entry for its key (a larger "t",
// written by another replica that served the conversation later). For
// each entry it returns its outcome (1 written, 0 the newer entry kept) and
// the value it found ("" when none), so that the abandoned session, ours or
// the one replaced, can be reported.
//
// KEYS[1] the shard's index, KEYS[2..n+1] values; ARGV[1] grace ms, then
// four per entry in KEYS' order: index member, encoded value, its "t", TTL
// ms.
var writeBackScript = redis.NewScript(redisNowMs + `
local grace = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local b = 2 + (i - 2) * 4
  local member, val, at, ttl = ARGV[b], ARGV[b + 1], tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local old = redis.call('GET', KEYS[i])
  local theirs = 0
  if old then
    local ok, o = pcall(cjson.decode, old)
    if ok and type(o) == 'table' then theirs = tonumber(o.t) or 0 end
  end
  if old and theirs >= at then
    out[#out + 1] = 0
  else
    redis.call('SET', KEYS[i], val, 'PX', ttl + grace)
    redis.call('ZADD', KEYS[1], now + ttl, member)
    out[#out + 1] = 1
  end
  out[#out + 1] = old or ''
end
return out
`)

// heldEntry is an affinity entry on its way back to Redis.
type heldEntry struct {
	key  string
	a    route.Affinity
	left time.Duration // its life left
}

// writeBack writes the affinity entries put while Redis was away to Redis,
// newest wins. Each leaves the local tier as it goes: a turn that asks for
// it meanwhile finds it in Redis or nowhere (a new session, never a session
// continued twice). What Redis does not take goes back to the local tier
// and the queue, for the next try.
func (r *Redis) writeBack(ctx context.Context) {
	keys := r.pending.takePuts()
	if len(keys) == 0 {
		return
	}
	var byShard [affinityShards][]heldEntry
	for _, k := range keys {
		if a, left, ok := r.local.takeLocalOnly(k); ok {
			sh := affinityShard(k)
			byShard[sh] = append(byShard[sh], heldEntry{key: k, a: a, left: left})
		}
	}
	written, kept := 0, 0
	var failed []heldEntry
	for sh, entries := range byShard {
		for len(entries) > 0 {
			batch := entries[:min(removeBatch, len(entries))]
			entries = entries[len(batch):]
			if len(failed) > 0 {
				failed = append(failed, batch...) // Redis went away again: keep the rest
				continue
			}
			w, k, err := r.writeBatch(ctx, sh, batch)
			written, kept = written+w, kept+k
			if err != nil {
				r.conn.MarkDown(err)
				failed = append(failed, batch...)
			}
		}
	}
	for _, e := range failed {
		r.local.restoreLocalOnly(e.key, e.a, e.left)
		r.pending.queuePut(e.key)
	}
	if written+kept > 0 {
		r.cfg.Logger.Info("affinity kept while redis was away written back", "written", written,
			"newer_kept", kept, "left", len(failed))
	}
}

// writeBatch runs writeBackScript over one shard's batch and reports the
// sessions it abandoned: the replaced one, or ours when a newer one stays.
func (r *Redis) writeBatch(ctx context.Context, shard int, batch []heldEntry) (written, kept int, err error) {
	keys := make([]string, 0, len(batch)+1)
	args := make([]any, 0, 4*len(batch)+1)
	keys = append(keys, r.affinityIndexKey(shard))
	args = append(args, r.cfg.EvictGrace.Milliseconds())
	for _, e := range batch {
		keys = append(keys, r.entryKey(e.key))
		args = append(args, e.key, encodeAffinity(e.a), e.a.At, max(e.left.Milliseconds(), 1))
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.ResponseTimeout)
	defer cancel()
	res, err := writeBackScript.Run(ctx, r.client, keys, args...).Slice()
	if err != nil {
		return 0, 0, err
	}
	for i, e := range batch {
		if 2*i+1 >= len(res) {
			break
		}
		ok, _ := res[2*i].(int64)
		found, _ := res[2*i+1].(string)
		other, derr := decodeAffinity(found)
		switch {
		case ok == 1:
			written++
			if found != "" && derr == nil && !other.SameSession(e.a) {
				r.report(other)
			}
		default:
			kept++
			if derr != nil || !other.SameSession(e.a) {
				r.report(e.a)
			}
		}
	}
	return written, kept, nil
}
