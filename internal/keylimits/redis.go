package keylimits

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// Redis is the Limiter every replica shares. A key's state is under
// "<prefix>limit:{<key name>}": ":rpm:<minute>" counters, a ":conc" sorted
// set of slots scored with their expiry, and ":tok:<day>" counters. The
// scripts build the windowed names from KEYS[1], the base; the hash tag
// keeps all of one key's limits in one slot of a Redis Cluster. The
// clock is Redis's (TIME), so replicas whose clocks differ still share one
// minute and one day.
//
// While Redis is away (its Conn marks it down, shared with the stores
// beside it) the replica enforces each key's limits alone, with an
// in-process Memory that also knows which keys Redis said spent their day.
// A ticket's end that cannot reach Redis (its tokens, its slot's release)
// is held, per key, and sent again by Run until Redis takes it; nothing is
// dropped but slot releases past a bound, whose slots expire anyway.
type Redis struct {
	conn    *redisconn.Conn
	local   *Memory
	slotTTL time.Duration
	timeout time.Duration
	onError func(op string, err error)
	onHeld  func(n int)

	wg sync.WaitGroup

	mu    sync.Mutex
	held  map[string]*heldEnd // by key base
	nheld int                 // ticket ends and charges held
}

// heldEnd is what a key owes Redis: tokens to charge and slots to free.
type heldEnd struct {
	tokens int64
	slots  []string
	n      int // the ends and charges merged in
}

// maxHeldSlots bounds the releases held per key; a slot not released
// expires after the slot TTL.
const maxHeldSlots = 1024

// RedisConfig configures a Redis limiter.
type RedisConfig struct {
	// SlotTTL is how long a concurrency slot lives without a renewal: a
	// replica that dies frees its slots after it. Renewed every third of it
	// while its request runs. Default 60 s.
	SlotTTL time.Duration
	// Timeout bounds each call. Default 250 ms.
	Timeout time.Duration
	// OnError receives renewals that failed (the Conn reports the rest
	// under key_limits). Default none.
	OnError func(op string, err error)
	// OnHeld receives how many ticket ends and charges wait for Redis
	// after each change. Default none.
	OnHeld func(n int)
	// Now is the clock of the in-process limits used while Redis is away.
	// Default time.Now.
	Now func() time.Time
}

// NewRedis returns a limiter on conn, under its key prefix.
func NewRedis(conn *redisconn.Conn, cfg RedisConfig) *Redis {
	if cfg.SlotTTL <= 0 {
		cfg.SlotTTL = time.Minute
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 250 * time.Millisecond
	}
	if cfg.OnError == nil {
		cfg.OnError = func(string, error) {}
	}
	if cfg.OnHeld == nil {
		cfg.OnHeld = func(int) {}
	}
	return &Redis{conn: conn, local: NewMemory(cfg.Now), slotTTL: cfg.SlotTTL, timeout: cfg.Timeout,
		onError: cfg.OnError, onHeld: cfg.OnHeld, held: map[string]*heldEnd{}}
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

// doneScript frees slots and charges today's tokens.
//
// KEYS[1] the key's base; ARGV[1] tokens, ARGV[2..] slots.
var doneScript = redis.NewScript(nowMs + `
for i = 2, #ARGV do
  redis.call('ZREM', KEYS[1] .. ':conc', ARGV[i])
end
local tokens = tonumber(ARGV[1])
if tokens > 0 then
  local k = KEYS[1] .. ':tok:' .. math.floor(now / 86400000)
  redis.call('INCRBY', k, tokens)
  redis.call('PEXPIRE', k, 2 * 86400000)
end
return 1
`)

// Acquire implements Limiter. While Redis is away it admits under the
// in-process limits; an error is returned only when ctx ended.
func (r *Redis) Acquire(ctx context.Context, key string, l Limits) (*Ticket, error) {
	if l.None() {
		return &Ticket{}, nil
	}
	const op = "key_limits"
	if !r.conn.Allow() {
		r.conn.Skipped(op)
		return r.acquireLocal(ctx, key, l)
	}
	base := r.base(key)
	slot := ""
	if l.Concurrency > 0 {
		slot = rand.Text()
	}
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	res, err := acquireScript.Run(cctx, r.conn.Client(), []string{base}, l.RPM, l.Concurrency, l.TokensPerDay, slot,
		r.slotTTL.Milliseconds()).Slice()
	cancel()
	if err != nil {
		if !r.conn.Failed(ctx, op, err) {
			return &Ticket{}, fmt.Errorf("limits: acquire for %s: %w", key, ctx.Err())
		}
		return r.acquireLocal(ctx, key, l)
	}
	r.conn.Succeeded()
	if d := denied(key, l, res); d != nil {
		if d.Limit == LimitTokensPerDay {
			r.local.spent(key, l.TokensPerDay) // holds while Redis is away
		}
		return nil, d
	}
	stop := make(chan struct{})
	if slot != "" {
		r.wg.Go(func() { r.renew(base, slot, stop) })
	}
	return &Ticket{done: func(tokens int64) {
		close(stop)
		r.settle(base, slot, tokens)
	}}, nil
}

// acquireLocal admits under the in-process limits while Redis is away; the
// ticket's tokens also count in Redis, once it takes them.
func (r *Redis) acquireLocal(ctx context.Context, key string, l Limits) (*Ticket, error) {
	t, err := r.local.Acquire(ctx, key, l)
	if err != nil {
		return t, err
	}
	base := r.base(key)
	return &Ticket{done: func(tokens int64) {
		t.Done(tokens)
		r.settle(base, "", tokens)
	}}, nil
}

// base is the start of every key of name's limits.
func (r *Redis) base(name string) string { return r.conn.Key("limit:{" + name + "}") }

// Charge implements Limiter. Tokens Redis cannot take now are held and
// charged once it can; it returns an error only for a ctx that ended.
func (r *Redis) Charge(ctx context.Context, key string, tokens int64) error {
	if tokens <= 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("limits: charge %s: %w", key, err)
	}
	r.settle(r.base(key), "", tokens)
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
			err := renewScript.Run(ctx, r.conn.Client(), []string{base}, slot, r.slotTTL.Milliseconds()).Err()
			cancel()
			if err != nil {
				r.onError("limits_renew", err)
			}
		}
	}
}

// Wait waits for the renewals of tickets already done to stop.
func (r *Redis) Wait() { r.wg.Wait() }
