// Package keylimits holds the state of per-key limits: requests per minute, a
// request's slot among a key's concurrent requests, and the tokens a key
// used today (UTC). In Redis every replica enforces the same limits
// together; in memory, one replica alone.
//
// Requests per minute is a sliding window estimated from two fixed
// one-minute windows (the previous one weighted by how much of it still
// falls in the last minute), which is exact enough for a limit and costs two
// counters. A concurrency slot is held as a member of a sorted set scored
// with its expiry and renewed while its request runs, so a replica that dies
// frees its slots within one slot TTL. The token quota is checked when a
// request is admitted and charged when it ends, so the request that crosses
// it completes and the next ones are refused.
package keylimits

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Limits are one key's limits; a zero field is no limit.
type Limits struct {
	RPM          int
	Concurrency  int
	TokensPerDay int64
}

// None reports whether l limits nothing.
func (l Limits) None() bool { return l.RPM <= 0 && l.Concurrency <= 0 && l.TokensPerDay <= 0 }

// Names of the limits, as Denied.Limit reports them.
const (
	LimitRPM          = "rpm"
	LimitConcurrency  = "concurrency"
	LimitTokensPerDay = "tokens_per_day"
)

// Denied is a request refused by one of its key's limits.
type Denied struct {
	Key string
	// Limit is LimitRPM, LimitConcurrency or LimitTokensPerDay.
	Limit string
	// Max is the limit's value.
	Max int64
	// RetryAfter is when a retry can pass this limit (at least a second).
	RetryAfter time.Duration
}

func (d *Denied) Error() string {
	switch d.Limit {
	case LimitRPM:
		return fmt.Sprintf("API key %q is over its limit of %d requests per minute", d.Key, d.Max)
	case LimitConcurrency:
		return fmt.Sprintf("API key %q is over its limit of %d concurrent requests", d.Key, d.Max)
	default:
		return fmt.Sprintf("API key %q used its quota of %d tokens for today (UTC)", d.Key, d.Max)
	}
}

// Limiter admits requests under their key's limits.
type Limiter interface {
	// Acquire admits one request of key under l, or returns a *Denied.
	// Another error means the state could not be read or written; the
	// request should then go ahead (the limits fail open). The ticket must
	// be ended with Done.
	Acquire(ctx context.Context, key string, l Limits) (*Ticket, error)
	// Charge counts tokens against key's daily quota without admitting a
	// request: the tokens of a request another replica admitted and this
	// one served.
	Charge(ctx context.Context, key string, tokens int64) error
}

// Ticket is an admitted request's hold on its key's limits.
type Ticket struct {
	once sync.Once
	done func(tokens int64)
}

// Done ends the request: its concurrency slot is freed and the tokens it
// used count against today's quota. It is safe to call twice (the second
// call does nothing) and on a nil Ticket.
func (t *Ticket) Done(tokens int64) {
	if t == nil || t.done == nil {
		return
	}
	t.once.Do(func() { t.done(tokens) })
}

// retryFloor is the shortest Retry-After a denial asks for.
const retryFloor = time.Second

// rpmRetry is how long until the sliding window, with prev requests in the
// previous minute and cur in this one, at pos into this minute, admits one
// more under rpm.
func rpmRetry(rpm, prev, cur int64, pos time.Duration) time.Duration {
	var at time.Duration // point of the minute, from its start, when one more fits
	switch {
	case cur+1 > rpm:
		// Only the next minute can admit, once this minute's weight has
		// fallen enough: cur*(1-f) + 1 <= rpm.
		f := 1.0
		if cur > 0 {
			f = 1 - float64(rpm-1)/float64(cur)
		}
		at = time.Minute + time.Duration(f*float64(time.Minute))
	default:
		// Later in this minute: prev*(1-f) + cur + 1 <= rpm.
		f := 1 - float64(rpm-cur-1)/float64(prev)
		at = time.Duration(f * float64(time.Minute))
	}
	return max(at-pos, retryFloor)
}

// untilTomorrow is the time from now to the next UTC midnight.
func untilTomorrow(now time.Time) time.Duration {
	now = now.UTC()
	next := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	return max(next.Sub(now), retryFloor)
}
