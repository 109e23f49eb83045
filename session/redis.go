package session

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/worker"
)

// RedisConfig configures the Redis store. Zero values take the defaults.
type RedisConfig struct {
	// Prefix starts every key the store writes. Default "poolgate:".
	Prefix string
	// AffinityTimeout bounds each affinity call to Redis, so a hung server
	// cannot stall a request. Default 250 ms.
	AffinityTimeout time.Duration
	// ResponseTimeout bounds each response-object call and each batch of a
	// flush or sweep. Default 1 s.
	ResponseTimeout time.Duration
	// RetryInterval is how long the store skips Redis after a failed call
	// before it probes again (a request or Run probes). Default 1 s.
	RetryInterval time.Duration
	// SweepInterval is how often Run reports and removes expired affinity
	// entries and drops expired local ones. Default 30 s.
	SweepInterval time.Duration
	// EvictGrace is how long an expired affinity value stays in Redis so a
	// sweeper can still read it and report it to OnEvict. Entries that expire
	// while no replica runs Run vanish unreported after it. Default 10 min.
	EvictGrace time.Duration
	// OwnerMaxResponses and OwnerMaxResponseBytes cap what one owner (one
	// API key) keeps in Redis: beyond either, its oldest responses are
	// dropped, so one key can never fill Redis. Defaults 1000 and 64 MiB.
	OwnerMaxResponses     int
	OwnerMaxResponseBytes int64
	// Memory configures the in-process tier and the limits shared with Redis:
	// AffinityTTL and ResponseTTL apply to both tiers; Now is the clock of
	// both; OnEvict receives evictions from both, each entry once (by the
	// replica whose Run swept it, for entries that lived in Redis).
	Memory MemoryConfig
	// OnError is called for every operation that could not use Redis,
	// including those skipped while Redis is marked down (their error wraps
	// redisconn.ErrUnavailable), with op one of take_affinity, put_affinity,
	// flush_affinity, save_response, load_response, delete_response, and
	// the operations other stores run on Conn (session/bundle's
	// save_bundle, load_bundle): the poolgate_store_errors_total{op}
	// counter. It is called from many goroutines and must not block.
	// Default: none.
	OnError func(op string, err error)
	// OnRecover is called by Run, in Run's goroutine, after Redis answers
	// again following an outage (when a call failed, the store marked it
	// down, and a later call succeeded): the moment to put back what a Redis
	// that returned empty lost (session/bundle's Republish). Default none.
	OnRecover func(ctx context.Context)
	// Logger receives one warning when Redis becomes unreachable and one info
	// line when it is back. Default slog.Default().
	Logger *slog.Logger
	// OnHealth is told each change of Healthy, in order (the
	// poolgate_redis_up gauge). It must not block. Default none.
	OnHealth func(up bool)
	// OnHeld is told how many affinity entries put while Redis was away
	// wait to be written back, after each change (the
	// poolgate_affinity_held gauge). It must not block. Default none.
	OnHeld func(n int)
}

func (c RedisConfig) withDefaults() RedisConfig {
	c.Prefix = cmp.Or(c.Prefix, "poolgate:")
	worker.Default(&c.AffinityTimeout, 250*time.Millisecond)
	worker.Default(&c.ResponseTimeout, time.Second)
	worker.Default(&c.RetryInterval, time.Second)
	worker.Default(&c.SweepInterval, 30*time.Second)
	worker.Default(&c.EvictGrace, 10*time.Minute)
	worker.Default(&c.OwnerMaxResponses, 1000)
	worker.Default(&c.OwnerMaxResponseBytes, 64<<20)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.OnHeld == nil {
		c.OnHeld = func(int) {}
	}
	c.Memory = c.Memory.withDefaults()
	return c
}

// Redis is the shared store for several replicas. It keeps an in-process
// Memory as a local tier: affinity puts and response saves go to both, reads
// try Redis and fall back to the local tier when Redis fails, so a Redis that
// is down, slow or restarting costs reuse but never fails a call. Affinity
// put while Redis was away is written back once it answers (Run), unless
// another replica wrote a newer entry for the conversation meanwhile, so a
// conversation that went on during an outage keeps its upstream session on
// every replica. It is safe for concurrent use.
type Redis struct {
	cfg     RedisConfig
	conn    *redisconn.Conn
	client  redisconn.Client // conn's
	local   *Memory
	pending pending
}

// NewRedis returns a store on client, which it closes on Close. The client
// should honour context deadlines (go-redis: ContextTimeoutEnabled).
func NewRedis(cfg RedisConfig, client redisconn.Client) *Redis {
	cfg = cfg.withDefaults()
	conn := redisconn.NewConn(redisconn.ConnConfig{Prefix: cfg.Prefix, RetryInterval: cfg.RetryInterval,
		PingTimeout: cfg.AffinityTimeout, Now: cfg.Memory.Now, OnError: cfg.OnError, Logger: cfg.Logger,
		OnHealth: cfg.OnHealth}, client)
	r := &Redis{cfg: cfg, conn: conn, client: client, local: NewMemory(cfg.Memory)}
	r.pending.maxPuts, r.pending.onHeld = cfg.Memory.MaxAffinity, cfg.OnHeld
	return r
}

// Close closes the Redis client.
func (r *Redis) Close() error { return r.conn.Close() }

// Healthy reports whether Redis answered the last call.
func (r *Redis) Healthy() bool { return r.conn.Healthy() }

// Ping asks Redis directly (never skipped) and updates Healthy.
func (r *Redis) Ping(ctx context.Context) error { return r.conn.Ping(ctx) }

// Conn returns the store's Redis connection and health, for the stores kept
// beside the session state (session/bundle's sealed bundles): they share
// its key prefix, and an outage is noticed and logged once for all.
func (r *Redis) Conn() *redisconn.Conn { return r.conn }

func (r *Redis) report(a route.Affinity) {
	if r.cfg.Memory.OnEvict != nil {
		r.cfg.Memory.OnEvict(a)
	}
}

// TakeAffinity removes and returns the entry under key, or ErrNotFound. When
// Redis fails it takes from the local tier.
func (r *Redis) TakeAffinity(ctx context.Context, ak route.AffinityKey) (route.Affinity, error) {
	key := string(ak)
	const op = "take_affinity"
	if !r.conn.Allow() {
		r.conn.Skipped(op)
		return r.takeLocal(key)
	}
	a, expired, err := r.takeRemote(ctx, key)
	switch {
	case err == nil:
		r.conn.Succeeded()
		r.local.discardAffinity(key)
		if expired {
			r.report(a)
			return route.Affinity{}, ErrNotFound
		}
		return a, nil
	case errors.Is(err, ErrNotFound):
		r.conn.Succeeded()
		// A local-only entry was put while Redis was down; a mirrored one
		// was taken from Redis by another replica since, so it is stale.
		a, mirrored, err := r.local.takeAffinity(key)
		if err != nil || mirrored {
			return route.Affinity{}, ErrNotFound
		}
		return a, nil
	default:
		if !r.conn.Failed(ctx, op, err) {
			return route.Affinity{}, ctx.Err()
		}
	}
	return r.takeLocal(key)
}

// takeLocal serves a take from the local tier while Redis is away. Taking a
// mirrored entry leaves its Redis copy behind; it is queued for deletion so
// that no later turn reuses the session once Redis is back.
func (r *Redis) takeLocal(key string) (route.Affinity, error) {
	a, mirrored, err := r.local.takeAffinity(key)
	if err == nil && mirrored {
		r.pending.queueAffinity(key)
	}
	return a, err
}

// PutAffinity stores a under key in Redis and locally. It fails only when ctx
// is already done; a Redis failure leaves the entry in the local tier alone.
func (r *Redis) PutAffinity(ctx context.Context, ak route.AffinityKey, a route.Affinity) error {
	key := string(ak)
	if err := ctx.Err(); err != nil {
		return err
	}
	mirrored := false
	if r.conn.Allow() {
		// A write-back after a clean finish should land even if the client
		// hangs up now; the deadline still bounds it.
		old, err := r.putRemote(context.WithoutCancel(ctx), key, a)
		if err == nil {
			r.conn.Succeeded()
			mirrored = true
			if old != nil && !old.SameSession(a) {
				r.report(*old)
			}
		} else {
			r.conn.Failed(context.Background(), "put_affinity", err)
		}
	} else {
		r.conn.Skipped("put_affinity")
	}
	r.local.putAffinity(key, a, mirrored)
	if !mirrored {
		r.pending.queuePut(key) // written back once Redis answers
	}
	return nil
}

// FlushAffinity removes owner's entries (all when owner is empty) from both
// tiers, reports them to OnEvict, and returns how many it removed. When Redis
// fails only the local tier is flushed and the error is not returned.
func (r *Redis) FlushAffinity(ctx context.Context, owner string) (int, error) {
	const op = "flush_affinity"
	_, n := r.local.flushAffinity(owner) // mirrored copies are counted in Redis
	if !r.conn.Allow() {
		r.conn.Skipped(op)
		return n, nil
	}
	members, err := r.indexMembers(ctx, false)
	if err == nil {
		var mine []string
		for _, m := range members {
			if route.AffinityKey(m).OwnedBy(owner) {
				mine = append(mine, m)
			}
		}
		var removed []route.Affinity
		removed, err = r.removeRemote(ctx, "all", mine)
		for _, a := range removed {
			r.report(a)
		}
		n += len(removed)
	}
	if err != nil {
		if !r.conn.Failed(ctx, op, err) {
			return n, ctx.Err()
		}
		return n, nil
	}
	r.conn.Succeeded()
	return n, nil
}

// SaveResponse stores data under id for ttl (Memory.ResponseTTL when 0) in
// Redis, counted against owner's quota, and keeps a local copy, so a GET on
// this replica works while Redis is away. The responses in keep (the earlier
// links of its chain) live as long as it from now on.
func (r *Redis) SaveResponse(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	worker.Default(&ttl, r.cfg.Memory.ResponseTTL)
	var remoteErr error = redisconn.ErrUnavailable
	if r.conn.Allow() {
		remoteErr = r.saveRemote(context.WithoutCancel(ctx), owner, id, data, ttl, keep)
		if remoteErr == nil {
			r.conn.Succeeded()
		} else {
			r.conn.Failed(context.Background(), "save_response", remoteErr)
		}
	} else {
		r.conn.Skipped("save_response")
	}
	err := r.local.saveResponse(id, data, ttl, remoteErr == nil, keep)
	if remoteErr == nil {
		return nil // a local copy too large for the local tier is no loss
	}
	return err
}

// LoadResponse returns the object stored under id, or ErrNotFound. When Redis
// fails it answers from the local copy.
func (r *Redis) LoadResponse(ctx context.Context, id string) ([]byte, error) {
	const op = "load_response"
	if !r.conn.Allow() {
		r.conn.Skipped(op)
		data, _, err := r.local.loadResponse(id)
		return data, err
	}
	data, err := r.loadRemote(ctx, id)
	switch {
	case err == nil:
		r.conn.Succeeded()
		return data, nil
	case errors.Is(err, ErrNotFound):
		r.conn.Succeeded()
		return r.localOnly(id)
	default:
		if !r.conn.Failed(ctx, op, err) {
			return nil, ctx.Err()
		}
	}
	data, _, err = r.local.loadResponse(id)
	return data, err
}

// localOnly answers for an object Redis does not have: only one saved
// while Redis was down may live in the local tier alone; a mirrored copy
// whose original is gone was deleted elsewhere.
func (r *Redis) localOnly(id string) ([]byte, error) {
	data, mirrored, err := r.local.loadResponse(id)
	if err != nil || mirrored {
		_, _ = r.local.deleteResponse(id)
		return nil, ErrNotFound
	}
	return data, nil
}

// LoadResponses loads several objects in one round trip; a missing one is
// nil. When Redis fails it answers from the local copies.
func (r *Redis) LoadResponses(ctx context.Context, ids []string) ([][]byte, error) {
	const op = "load_response"
	out := make([][]byte, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var vals []any
	err := redisconn.ErrUnavailable
	if r.conn.Allow() {
		vals, err = r.loadManyRemote(ctx, ids)
	} else {
		r.conn.Skipped(op)
	}
	switch {
	case err == nil:
		r.conn.Succeeded()
		for i, v := range vals {
			if s, ok := v.(string); ok {
				out[i] = []byte(s)
			} else {
				out[i], _ = r.localOnly(ids[i])
			}
		}
		return out, nil
	case !errors.Is(err, redisconn.ErrUnavailable) && !r.conn.Failed(ctx, op, err):
		return nil, ctx.Err()
	}
	for i, id := range ids {
		out[i], _, _ = r.local.loadResponse(id)
	}
	return out, nil
}

// DeleteResponse removes the object stored under id from both tiers, or
// returns ErrNotFound. While Redis is away it removes the local copy, queues
// the Redis delete for when it is back, and reports success.
func (r *Redis) DeleteResponse(ctx context.Context, id string) error {
	const op = "delete_response"
	if r.conn.Allow() {
		n, err := r.deleteRemote(ctx, id)
		if err == nil {
			r.conn.Succeeded()
			mirrored, lerr := r.local.deleteResponse(id)
			if n == 0 && (lerr != nil || mirrored) {
				return ErrNotFound
			}
			return nil
		}
		if !r.conn.Failed(ctx, op, err) {
			return ctx.Err()
		}
	} else {
		r.conn.Skipped(op)
	}
	_, _ = r.local.deleteResponse(id)
	r.pending.queueResponse(id)
	return nil
}
