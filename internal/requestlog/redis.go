package requestlog

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// Redis is the Log every replica shares: a list "<prefix>requests", newest
// first, trimmed to Config.Kept entries on every write. Beside it, in the
// same hash slot, a hash holds the newest batch each writer pushed, so that
// a batch tried again after a failure that may have landed is stored once,
// and each write waits for a replica when the primary has one
// (redisconn.RunDurable), so a failover cannot lose a batch that was
// reported written.
type Redis struct {
	conn    *redisconn.Conn
	key     string
	marks   string
	writer  string
	cfg     Config
	timeout time.Duration
}

// NewRedis returns a log on conn, under its key prefix; conn's health is
// shared with the stores beside it. Its batches are numbered under a writer
// name of its own, new for every log.
func NewRedis(conn *redisconn.Conn, cfg Config) *Redis {
	key := conn.Key("requests")
	// The marks share the list's slot, so one script touches both on a
	// Redis Cluster (config refuses a prefix that allows no such key).
	marks, _ := redisconn.Beside(key, ":seq")
	return &Redis{conn: conn, key: key, marks: marks, writer: rand.Text()[:16], cfg: cfg.withDefaults(),
		timeout: time.Second}
}

// addScript pushes a batch and trims the list, unless the writer's mark
// says the batch is in already. A mark is "<seq> <unix ms>"; marks of
// writers silent for a day (processes long gone) are pruned once there are
// many.
//
// KEYS[1] the list, KEYS[2] the marks; ARGV[1] the writer, ARGV[2] the
// batch's number (0: no mark), ARGV[3] how many entries are kept,
// ARGV[4..] the entries, oldest first.
var addScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seq = tonumber(ARGV[2])
if seq > 0 then
  local m = redis.call('HGET', KEYS[2], ARGV[1])
  if m and tonumber(string.match(m, '^%d+')) >= seq then return 0 end
  redis.call('HSET', KEYS[2], ARGV[1], seq .. ' ' .. now)
  redis.call('PEXPIRE', KEYS[2], 86400000)
  if redis.call('HLEN', KEYS[2]) > 64 then
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all, 2 do
      if tonumber(string.match(all[i + 1], ' (%d+)$') or '0') < now - 86400000 then
        redis.call('HDEL', KEYS[2], all[i])
      end
    end
  end
end
for i = 4, #ARGV do
  redis.call('LPUSH', KEYS[1], ARGV[i])
end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[3]) - 1)
return 1
`)

// Add implements Log: the batch in one durable script.
func (r *Redis) Add(ctx context.Context, seq uint64, es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	args := make([]any, 0, len(es)+3)
	args = append(args, r.writer, seq, r.cfg.Kept())
	for _, e := range es {
		b, err := json.Marshal(r.cfg.prepare(e))
		if err != nil {
			return err
		}
		args = append(args, b)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	var unconfirmed error
	err := r.conn.Do(ctx, "log_request", func(ctx context.Context, c redisconn.Client) error {
		err := redisconn.RunDurable(ctx, c, addScript, []string{r.key, r.marks}, args...).Err()
		if errors.Is(err, redisconn.ErrNotReplicated) {
			unconfirmed = err // Redis answered; the batch is tried again
			return nil
		}
		return err
	})
	if err == nil {
		err = unconfirmed
	}
	if err != nil {
		return fmt.Errorf("request log: add %d entries: %w", len(es), err)
	}
	return nil
}

// List implements Log.
func (r *Redis) List(ctx context.Context, f Filter) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	raw, err := r.conn.Client().LRange(ctx, r.key, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, s := range raw {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		var e Entry
		if json.Unmarshal([]byte(s), &e) == nil && f.matches(&e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// scrubScript rewrites, in place and in one step, every entry of the list
// KEYS[1] that holds a prompt or an answer, without them.
var scrubScript = redis.NewScript(`
local n = 0
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i, v in ipairs(items) do
  if string.find(v, '"prompt":', 1, true) or string.find(v, '"answer":', 1, true) then
    local ok, e = pcall(cjson.decode, v)
    if ok and type(e) == 'table' then
      e.prompt = nil
      e.answer = nil
      redis.call('LSET', KEYS[1], i - 1, cjson.encode(e))
      n = n + 1
    end
  end
end
return n
`)

// Scrub implements Log.
func (r *Redis) Scrub(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*r.timeout)
	defer cancel()
	n, err := scrubScript.Run(ctx, r.conn.Client(), []string{r.key}).Int()
	return n, err
}
