package keylimits

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Limiter every replica shares. A key's state is under
// "<prefix>limit:{<key name>}": ":rpm:<minute>" counters, a ":conc" sorted
// set of slots scored with their expiry, and ":tok:<day>" counters. The
// scripts build the windowed names from KEYS[1], the base; the hash tag
// keeps all of one key's limits in one slot of a Redis Cluster. The
// clock is Redis's (TIME), so replicas whose clocks differ still share one
// minute and one day.
type Redis struct {
	rdb     redis.UniversalClient
	prefix  string
	slotTTL time.Duration
	timeout time.Duration
	onError func(op string, err error)

	wg sync.WaitGroup
}

// RedisConfig configures a Redis limiter.
type RedisConfig struct {
	// Prefix starts every key (the session store's, e.g. "poolgate:").
	Prefix string
	// SlotTTL is how long a concurrency slot lives without a renewal: a
	// replica that dies frees its slots after it. Renewed every third of it
	// while its request runs. Default 60 s.
	SlotTTL time.Duration
	// Timeout bounds each call. Default 250 ms.
	Timeout time.Duration
	// OnError receives renewals and releases that failed (an acquire
	// returns its error). Default none.
	OnError func(op string, err error)
}

// NewRedis returns a limiter on rdb.
func NewRedis(rdb redis.UniversalClient, cfg RedisConfig) *Redis {
	if cfg.SlotTTL <= 0 {
		cfg.SlotTTL = time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 250 * time.Millisecond
	}
	if cfg.OnError == nil {
		cfg.OnError = func(string, error) {}
	}
	return &Redis{rdb: rdb, prefix: cfg.Prefix, slotTTL: cfg.SlotTTL, timeout: cfg.Timeout, onError: cfg.OnError}
}

const nowMs = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// acquireScript checks every limit, then takes the request's share of each:
// {""} when admitted, else the limit refused and what its Retry-After
// needs ({"rpm", prev, cur, ms into the minute}, {"concurrency"},
// {"tokens_per_day", now}).
var acquireScript = redis.NewScript(nowMs + `
local base = KEYS[1]
local rpm, conc, quota = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local win = math.floor(now / 60000)
local pos = now % 60000
if rpm > 0 then
  local cur = tonumber(redis.call('GET', base .. ':rpm:' .. win) or '0')
  local prev = tonumber(redis.call('GET', base .. ':rpm:' .. (win - 1)) or '0')
  if prev * (1 - pos / 60000) + cur + 1 > rpm then
    return {'rpm', prev, cur, pos}
  end
end
local slots = base .. ':conc'
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', slots, '-inf', now)
  if redis.call('ZCARD', slots) >= conc then
    return {'concurrency'}
  end
end
if quota > 0 then
  local used = tonumber(redis.call('GET', base .. ':tok:' .. math.floor(now / 86400000)) or '0')
  if used >= quota then
    return {'tokens_per_day', now}
  end
end
if rpm > 0 then
  local k = base .. ':rpm:' .. win
  redis.call('INCR', k)
  redis.call('PEXPIRE', k, 120000)
end
if conc > 0 then
  local ttl = tonumber(ARGV[5])
  redis.call('ZADD', slots, now + ttl, ARGV[4])
  redis.call('PEXPIRE', slots, ttl * 2)
end
return {''}
`)

// renewScript pushes a live slot's expiry on.
var renewScript = redis.NewScript(nowMs + `
local ttl = tonumber(ARGV[2])
if redis.call('ZADD', KEYS[1] .. ':conc', 'XX', 'CH', now + ttl, ARGV[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1] .. ':conc', ttl * 2)
end
return 1
`)

// doneScript frees a slot and charges today's tokens.
var doneScript = redis.NewScript(nowMs + `
if ARGV[1] ~= '' then
  redis.call('ZREM', KEYS[1] .. ':conc', ARGV[1])
end
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  local k = KEYS[1] .. ':tok:' .. math.floor(now / 86400000)
  redis.call('INCRBY', k, tokens)
  redis.call('PEXPIRE', k, 2 * 86400000)
end
return 1
`)

// Acquire implements Limiter.
func (r *Redis) Acquire(ctx context.Context, key string, l Limits) (*Ticket, error) {
	if l.None() {
		return &Ticket{}, nil
	}
	base := r.base(key)
	slot := ""
	if l.Concurrency > 0 {
		slot = rand.Text()
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	res, err := acquireScript.Run(cctx, r.rdb, []string{base}, l.RPM, l.Concurrency, l.TokensPerDay, slot,
		r.slotTTL.Milliseconds()).Slice()
	cancel()
	if err != nil {
		return &Ticket{}, fmt.Errorf("limits: acquire for %s: %w", key, err)
	}
	if d := denied(key, l, res); d != nil {
		return nil, d
	}
	stop := make(chan struct{})
	if slot != "" {
		r.wg.Go(func() { r.renew(base, slot, stop) })
	}
	return &Ticket{done: func(tokens int64) {
		close(stop)
		if slot == "" && tokens <= 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
		defer cancel()
		if err := doneScript.Run(ctx, r.rdb, []string{base}, slot, tokens).Err(); err != nil {
			r.onError("limits_done", err)
		}
	}}, nil
}

// base is the start of every key of name's limits.
func (r *Redis) base(name string) string { return r.prefix + "limit:{" + name + "}" }

// Charge implements Limiter.
func (r *Redis) Charge(ctx context.Context, key string, tokens int64) error {
	if tokens <= 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	if err := doneScript.Run(cctx, r.rdb, []string{r.base(key)}, "", tokens).Err(); err != nil {
		return fmt.Errorf("limits: charge %s: %w", key, err)
	}
	return nil
}

// denied reads the acquire script's answer.
func denied(key string, l Limits, res []any) *Denied {
	name, _ := res[0].(string)
	num := func(i int) int64 {
		if i < len(res) {
			if n, ok := res[i].(int64); ok {
				return n
			}
		}
		return 0
	}
	switch name {
	case LimitRPM:
		return &Denied{Key: key, Limit: LimitRPM, Max: int64(l.RPM),
			RetryAfter: rpmRetry(int64(l.RPM), num(1), num(2), time.Duration(num(3))*time.Millisecond)}
	case LimitConcurrency:
		return &Denied{Key: key, Limit: LimitConcurrency, Max: int64(l.Concurrency), RetryAfter: retryFloor}
	case LimitTokensPerDay:
		return &Denied{Key: key, Limit: LimitTokensPerDay, Max: l.TokensPerDay, RetryAfter: untilTomorrow(time.UnixMilli(num(1)))}
	}
	return nil
}

// renew keeps a slot alive until stop is closed.
func (r *Redis) renew(base, slot string, stop <-chan struct{}) {
	t := time.NewTicker(r.slotTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
			err := renewScript.Run(ctx, r.rdb, []string{base}, slot, r.slotTTL.Milliseconds()).Err()
			cancel()
			if err != nil {
				r.onError("limits_renew", err)
			}
		}
	}
}

// Wait waits for the renewals of tickets already done to stop.
func (r *Redis) Wait() { r.wg.Wait() }
