package usage

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// Redis is the Store shared by every replica: one hash per hour and one per
// day ("<prefix>usage:h:2026-11-23T19", "<prefix>usage:d:2026-11-23"), whose
// fields are "<key>\x1f<account>\x1f<counter>"; each hash expires a day
// after its retention. A hash also holds, under "#seq:<writer>", the
// newest batch each writer added to it, so that a batch tried again after
// a failure that may have landed (the connection lost after the script went
// out) is counted once, and each write waits for a replica when the primary
// has one (redisconn.RunDurable), so a failover cannot lose a batch that
// was reported written.
type Redis struct {
	conn      *redisconn.Conn
	writer    string
	retention time.Duration
	timeout   time.Duration
	now       func() time.Time
}

// RedisConfig configures a Redis store.
type RedisConfig struct {
	// Retention is how long counters are kept (at least a day).
	Retention time.Duration
	// Timeout bounds each call. Default 1 s.
	Timeout time.Duration
	// Now is the clock of the retention window. Default time.Now.
	Now func() time.Time
}

// NewRedis returns a store on conn, under its key prefix; conn's health is
// shared with the stores beside it. Its batches are numbered under a
// writer name of its own, new for every store.
func NewRedis(conn *redisconn.Conn, cfg RedisConfig) *Redis {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Redis{conn: conn, writer: rand.Text()[:16], retention: max(cfg.Retention, 24*time.Hour),
		timeout: cfg.Timeout, now: cfg.Now}
}

const sep = "\x1f"

// markPrefix starts the fields that hold the writers' newest batches; no
// counter field starts with it (they start with a key name, and key names
// are plain words).
const markPrefix = "#seq:"

// The counters' field suffixes.
var counters = [...]string{"requests", "input", "output", "errors", "reused"}

func values(t Totals) [len(counters)]int64 {
	return [...]int64{t.Requests, t.InputTokens, t.OutputTokens, t.Errors, t.Reused}
}

func (r *Redis) hashKey(hourly bool, name string) string {
	if hourly {
		return r.conn.Key("usage:h:" + name)
	}
	return r.conn.Key("usage:d:" + name)
}

// addScript adds a batch's sums to one hash, unless the writer's mark says
// the batch is already in: a batch tried again after an unknown outcome
// counts once. Writers send their batches in order, so the newest number
// is all a hash needs to keep.
//
// KEYS[1] the hash; ARGV[1] the writer's mark field, ARGV[2] the batch's
// number (0: no mark), ARGV[3] TTL s, ARGV[4..] field and increment pairs.
var addScript = redis.NewScript(`
local seq = tonumber(ARGV[2])
if seq > 0 then
  if tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') >= seq then return 0 end
  redis.call('HSET', KEYS[1], ARGV[1], seq)
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return 1
`)

// Add implements Store: one durable script per hash the batch touches (its
// hour and its day). A hash that took the batch before a failure is not
// counted again when the batch is tried again with the same seq.
func (r *Redis) Add(ctx context.Context, seq uint64, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	args := r.sums(recs, seq)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var unconfirmed error
	err := r.conn.Do(ctx, "record_usage", func(ctx context.Context, c redisconn.Client) error {
		for _, h := range slices.Sorted(maps.Keys(args)) {
			err := redisconn.RunDurable(ctx, c, addScript, []string{h}, args[h]...).Err()
			if errors.Is(err, redisconn.ErrNotReplicated) {
				// Redis answered; the batch is tried again as a whole.
				unconfirmed = err
				continue
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = unconfirmed
	}
	if err != nil {
		return fmt.Errorf("usage: add %d records: %w", len(recs), err)
	}
	return nil
}

// sums are addScript's arguments for each hash recs touch.
func (r *Redis) sums(recs []Record, seq uint64) map[string][]any {
	type field struct{ hash, name string }
	sums := map[field]int64{}
	for i := range recs {
		rec := &recs[i]
		t := rec.Time.UTC()
		vals := values(rec.totals())
		for _, h := range []string{r.hashKey(true, t.Format(hourLayout)), r.hashKey(false, t.Format(dayLayout))} {
			sums[field{h, ""}] += 0 // every touched hash is written, its TTL refreshed
			for j, c := range counters {
				if vals[j] != 0 {
					sums[field{h, rec.Key + sep + rec.Account + sep + c}] += vals[j]
				}
			}
		}
	}
	ttl := int64((r.retention + 24*time.Hour) / time.Second)
	args := map[string][]any{}
	for f, n := range sums {
		if args[f.hash] == nil {
			args[f.hash] = []any{markPrefix + r.writer, seq, ttl}
		}
		if f.name != "" {
			args[f.hash] = append(args[f.hash], f.name, n)
		}
	}
	return args
}

// Query implements Store: one HGETALL per bucket, in one round trip.
func (r *Redis) Query(ctx context.Context, q Query) ([]Row, error) {
	from, to := q.span(r.now(), r.retention)
	names := bucketsOf(from, to, q.Hourly, int(r.retention/time.Hour)+48)
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	_, err := r.conn.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
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
			if strings.HasPrefix(f, markPrefix) {
				continue
			}
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
