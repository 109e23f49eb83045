package usage

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the Store shared by every replica: one hash per hour and one per
// day ("<prefix>usage:h:2026-11-23T19", "<prefix>usage:d:2026-11-23"), whose
// fields are "<key>\x1f<account>\x1f<counter>"; each hash expires a day
// after its retention.
type Redis struct {
	rdb       redis.UniversalClient
	prefix    string
	retention time.Duration
	timeout   time.Duration
	now       func() time.Time
}

// RedisConfig configures a Redis store.
type RedisConfig struct {
	// Prefix starts every key (the session store's, e.g. "poolgate:").
	Prefix string
	// Retention is how long counters are kept (at least a day).
	Retention time.Duration
	// Timeout bounds each call. Default 1 s.
	Timeout time.Duration
	// Now is the clock of the retention window. Default time.Now.
	Now func() time.Time
}

// NewRedis returns a store on rdb.
func NewRedis(rdb redis.UniversalClient, cfg RedisConfig) *Redis {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Redis{rdb: rdb, prefix: cfg.Prefix, retention: max(cfg.Retention, 24*time.Hour), timeout: cfg.Timeout, now: cfg.Now}
}

const sep = "\x1f"

// The counters' field suffixes.
var counters = [...]string{"requests", "input", "output", "errors", "reused"}

func values(t Totals) [len(counters)]int64 {
	return [...]int64{t.Requests, t.InputTokens, t.OutputTokens, t.Errors, t.Reused}
}

func (r *Redis) hashKey(hourly bool, name string) string {
	if hourly {
		return r.prefix + "usage:h:" + name
	}
	return r.prefix + "usage:d:" + name
}

// Add implements Store: the batch, summed per hash field, in one round trip.
func (r *Redis) Add(ctx context.Context, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	type field struct{ hash, name string }
	sums := map[field]int64{}
	hashes := map[string]bool{}
	for i := range recs {
		rec := &recs[i]
		t := rec.Time.UTC()
		vals := values(rec.totals())
		for _, h := range []string{r.hashKey(true, t.Format(hourLayout)), r.hashKey(false, t.Format(dayLayout))} {
			hashes[h] = true
			for j, c := range counters {
				if vals[j] != 0 {
					sums[field{h, rec.Key + sep + rec.Account + sep + c}] += vals[j]
				}
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	ttl := r.retention + 24*time.Hour
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for f, n := range sums {
			p.HIncrBy(ctx, f.hash, f.name, n)
		}
		for h := range hashes {
			p.Expire(ctx, h, ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("usage: add %d records: %w", len(recs), err)
	}
	return nil
}

// Query implements Store: one HGETALL per bucket, in one round trip.
func (r *Redis) Query(ctx context.Context, q Query) ([]Row, error) {
	from, to := q.span(r.now(), r.retention)
	names := bucketsOf(from, to, q.Hourly, int(r.retention/time.Hour)+48)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, name := range names {
			cmds[i] = p.HGetAll(ctx, r.hashKey(q.Hourly, name))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage: query: %w", err)
	}
	var rows []Row
	for i, name := range names {
		bySlot := map[slot]*Totals{}
		for f, v := range cmds[i].Val() {
			parts := strings.Split(f, sep)
			n, err := strconv.ParseInt(v, 10, 64)
			if len(parts) != 3 || err != nil || !q.matches(parts[0], parts[1]) {
				continue
			}
			s := slot{parts[0], parts[1]}
			t := bySlot[s]
			if t == nil {
				t = &Totals{}
				bySlot[s] = t
			}
			switch parts[2] {
			case "requests":
				t.Requests = n
			case "input":
				t.InputTokens = n
			case "output":
				t.OutputTokens = n
			case "errors":
				t.Errors = n
			case "reused":
				t.Reused = n
			}
		}
		for s, t := range bySlot {
			rows = append(rows, Row{Bucket: name, Key: s.key, Account: s.account, Totals: *t})
		}
	}
	sortRows(rows)
	return rows, nil
}
