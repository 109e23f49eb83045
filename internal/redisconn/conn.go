package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis client the stores use; every
// redis.UniversalClient (one server, Sentinel, Cluster) satisfies it.
type Client interface {
	redis.Scripter
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	LRange(ctx context.Context, key string, start, stop int64) *redis.StringSliceCmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Ping(ctx context.Context) *redis.StatusCmd
	Close() error
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (redis.UniversalClient)(nil)
)

// ErrUnavailable is returned (and passed to OnError) for calls that skipped
// Redis because a recent call failed.
var ErrUnavailable = errors.New("redis marked down")

// ConnConfig configures a Conn. Zero values take the defaults.
type ConnConfig struct {
	// Prefix starts every key the stores write (Key). Default "poolgate:".
	Prefix string
	// RetryInterval is how long calls skip Redis after a failed one before
	// one call probes again. Default 1 s.
	RetryInterval time.Duration
	// PingTimeout bounds Ping. Default 250 ms.
	PingTimeout time.Duration
	// Now is the clock of the retry interval. Default time.Now.
	Now func() time.Time
	// OnError is called for every operation that could not use Redis,
	// including those skipped while Redis is marked down (their error wraps
	// ErrUnavailable), with the op the store named: the
	// poolgate_store_errors_total{op} counter. It is called from many
	// goroutines and must not block. Default: none.
	OnError func(op string, err error)
	// Logger receives one warning when Redis becomes unreachable and one
	// info line when it is back. Default slog.Default().
	Logger *slog.Logger
	// OnHealth is told each change of Healthy (the poolgate_redis_up
	// gauge), in order. It must not block. Default none.
	OnHealth func(up bool)
}

func (c ConnConfig) withDefaults() ConnConfig {
	if c.Prefix == "" {
		c.Prefix = "poolgate:"
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = time.Second
	}
	if c.PingTimeout <= 0 {
		c.PingTimeout = 250 * time.Millisecond
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Conn is one Redis connection as the stores share it: the client, the key
// prefix, and whether Redis is reachable. After a failure it marks Redis
// down for one retry interval, during which calls skip Redis at no cost;
// then one call probes. Transitions are logged once each, never per request,
// so an outage is noticed and reported once for every store on the Conn.
// It is safe for concurrent use.
type Conn struct {
	cfg    ConnConfig
	client Client

	mu      sync.Mutex
	down    bool
	retryAt time.Time
	// recovered is set when Redis answers after being marked down, and
	// cleared by TakeRecovered.
	recovered bool
	back      chan struct{} // a recovery, for Back (1-buffered)
}

// NewConn returns a Conn on client, which it closes on Close. The client
// should honour context deadlines (Dial's clients do).
func NewConn(cfg ConnConfig, client Client) *Conn {
	return &Conn{cfg: cfg.withDefaults(), client: client, back: make(chan struct{}, 1)}
}

// Client returns the client, for a store's own calls between Allow and
// Succeeded or Failed.
func (c *Conn) Client() Client { return c.client }

// Key returns the Redis key of name under the prefix.
func (c *Conn) Key(name string) string { return c.cfg.Prefix + name }

// Close closes the client.
func (c *Conn) Close() error { return c.client.Close() }

// Healthy reports whether Redis answered the last call.
func (c *Conn) Healthy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.down
}

// Ping asks Redis directly (never skipped) and updates Healthy.
func (c *Conn) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PingTimeout)
	defer cancel()
	if err := c.client.Ping(ctx).Err(); err != nil {
		c.MarkDown(err)
		return fmt.Errorf("redis ping: %w", err)
	}
	c.Succeeded()
	return nil
}

// Do runs fn against Redis under the Conn's health: while Redis is marked
// down it does not call fn, reports op to OnError as skipped and returns
// ErrUnavailable; otherwise it calls fn with the client, and a failure of fn
// marks Redis down and is reported under op (unless ctx ended, which says
// nothing about Redis), a success marks it up. fn must bound its calls by
// ctx and return only what Redis failed at: an answer (a missing key, a
// refused write) is a success.
func (c *Conn) Do(ctx context.Context, op string, fn func(ctx context.Context, c Client) error) error {
	if !c.Allow() {
		c.Skipped(op)
		return ErrUnavailable
	}
	return c.DoNow(ctx, op, fn)
}

// DoNow is Do for a call that must not be skipped while Redis is marked
// down, because going without costs more than a short wait: reading an
// account's bundle before its worker starts, where a skip means starting it
// logged out. It always calls fn, and records the outcome like Do.
func (c *Conn) DoNow(ctx context.Context, op string, fn func(ctx context.Context, c Client) error) error {
	if err := fn(ctx, c.client); err != nil {
		c.Failed(ctx, op, err)
		return err
	}
	c.Succeeded()
	return nil
}

// Allow reports whether a call should try Redis. While Redis is marked down
// it lets one caller per retry interval through as the probe.
func (c *Conn) Allow() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.down {
		return true
	}
	if now := c.cfg.Now(); !now.Before(c.retryAt) {
		c.retryAt = now.Add(c.cfg.RetryInterval)
		return true
	}
	return false
}

// Failed records a call that could not use Redis: it marks Redis down and
// reports op to OnError. It does neither and returns false when ctx ended,
// which says nothing about Redis.
func (c *Conn) Failed(ctx context.Context, op string, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	c.MarkDown(err)
	if c.cfg.OnError != nil {
		c.cfg.OnError(op, err)
	}
	return true
}

// Skipped records a call that did not try Redis because Allow said no.
func (c *Conn) Skipped(op string) {
	if c.cfg.OnError != nil {
		c.cfg.OnError(op, ErrUnavailable)
	}
}

// MarkDown marks Redis down after err, for a failure that is no caller's
// operation (a background sweep); the first one of an outage is logged.
func (c *Conn) MarkDown(err error) {
	c.mu.Lock()
	first := !c.down
	c.down = true
	c.retryAt = c.cfg.Now().Add(c.cfg.RetryInterval)
	if first && c.cfg.OnHealth != nil {
		c.cfg.OnHealth(false)
	}
	c.mu.Unlock()
	if first {
		c.cfg.Logger.Warn("redis unavailable; the stores degraded to their in-process copies",
			"err", err, "retry_every", c.cfg.RetryInterval)
	}
}

// Succeeded records a call Redis answered; the first one after an outage is
// logged.
func (c *Conn) Succeeded() {
	c.mu.Lock()
	was := c.down
	c.down = false
	c.recovered = c.recovered || was
	if was && c.cfg.OnHealth != nil {
		c.cfg.OnHealth(true)
	}
	c.mu.Unlock()
	if was {
		c.cfg.Logger.Info("redis reachable again; the stores recovered")
		select {
		case c.back <- struct{}{}:
		default:
		}
	}
}

// Back receives after Redis answered again following an outage, so that
// what waits for it (entries kept in process meanwhile) is written back at
// once rather than at the next tick. One receive may stand for several
// recoveries.
func (c *Conn) Back() <-chan struct{} { return c.back }

// TakeRecovered reports whether Redis answered again after being marked
// down since the last call: the moment to put back what a Redis that
// returned empty lost.
func (c *Conn) TakeRecovered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.recovered
	c.recovered = false
	return r
}
