package bundle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// Store keeps one sealed bundle per account: MemoryStore on a single node,
// RedisStore beside the session store on Redis. A save never replaces a
// newer bundle (ErrStale); a missing bundle is ErrNotFound. Bundles
// have no TTL: the manifest inside carries the expiry.
type Store interface {
	SaveBundle(ctx context.Context, account string, sealed []byte, v Version) error
	LoadBundle(ctx context.Context, account string) ([]byte, error)
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = (*RedisStore)(nil)
)

// Version orders the bundles of one account: the fencing token of the
// lease under which it was saved (0 outside a cluster), then its creation
// time. A save never replaces a newer bundle: a replica that lost the lease
// (a lower token) or a stale copy (an older one) can't overwrite what the
// account's holder saved since.
type Version struct {
	Token   int64
	Created time.Time
}

// newer reports whether v is newer than w.
func (v Version) newer(w Version) bool {
	if v.Token != w.Token {
		return v.Token > w.Token
	}
	return v.Created.After(w.Created)
}

// ErrStale: a newer bundle of the account is stored already.
var ErrStale = errors.New("a newer session bundle of this account is stored")

// ErrNotFound: no bundle of the account is stored.
var ErrNotFound = errors.New("no session bundle of this account is stored")

// MemoryStore keeps bundles in the process. Accounts are few, so it has no
// cap. It is safe for concurrent use.
type MemoryStore struct {
	mu      sync.Mutex
	bundles map[string]stored
}

// stored is one account's sealed bundle; mirrored is true when the copy is
// also in Redis (the local tier of a RedisStore).
type stored struct {
	data     []byte
	version  Version
	mirrored bool
}

// NewMemoryStore returns an empty store.
func NewMemoryStore() *MemoryStore { return &MemoryStore{bundles: map[string]stored{}} }

// SaveBundle stores a copy of the sealed bundle of account unless a newer
// one (by version) is stored, then it returns ErrStale.
func (m *MemoryStore) SaveBundle(_ context.Context, account string, sealed []byte, v Version) error {
	return m.save(account, sealed, v, false)
}

// LoadBundle returns a copy of account's sealed bundle, or ErrNotFound.
func (m *MemoryStore) LoadBundle(_ context.Context, account string) ([]byte, error) {
	e, ok := m.get(account)
	if !ok {
		return nil, ErrNotFound
	}
	return e.data, nil
}

func (m *MemoryStore) save(account string, sealed []byte, v Version, mirrored bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.bundles[account]; ok && old.version.newer(v) {
		return ErrStale
	}
	m.bundles[account] = stored{data: append([]byte(nil), sealed...), version: v, mirrored: mirrored}
	return nil
}

// get returns a copy of account's bundle.
func (m *MemoryStore) get(account string) (stored, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.bundles[account]
	e.data = append([]byte(nil), e.data...)
	return e, ok
}

func (m *MemoryStore) drop(account string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.bundles, account)
}

// all returns copies of every bundle, by account.
func (m *MemoryStore) all() map[string]stored {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]stored, len(m.bundles))
	for a, e := range m.bundles {
		e.data = append([]byte(nil), e.data...)
		out[a] = e
	}
	return out
}

// mirror replaces the local copy with what Redis holds.
func (m *MemoryStore) mirror(account string, sealed []byte, v Version) {
	m.drop(account)
	_ = m.save(account, sealed, v, true)
}

// Tier is the Redis connection the bundle store shares with the session
// store (a *redisconn.Conn): its key prefix and health tracking, so a Redis
// outage is noticed and logged once for both.
type Tier interface {
	Key(name string) string
	Do(ctx context.Context, op string, fn func(ctx context.Context, c redisconn.Client) error) error
	DoNow(ctx context.Context, op string, fn func(ctx context.Context, c redisconn.Client) error) error
}

var _ Tier = (*redisconn.Conn)(nil)

// timeout bounds each bundle call to Redis. Bundles are rare and larger
// than affinity entries, and a worker start waits for one, so it is longer
// than the affinity deadline.
const timeout = time.Second

// RedisStore keeps bundles in Redis, shared by the replicas, with a local
// copy: when Redis fails it answers from the copy and saves to the copy
// alone (pushed to Redis by a later load on this replica). It is safe for
// concurrent use.
type RedisStore struct {
	tier  Tier
	local *MemoryStore
}

// NewRedisStore returns a store that keeps bundles in tier's Redis.
func NewRedisStore(tier Tier) *RedisStore { return &RedisStore{tier: tier, local: NewMemoryStore()} }

// key is the key of account's sealed bundle; versionKey holds its version
// ("token:created ns"). They share a hash tag, so that in a Redis Cluster
// saveScript finds both in one slot.
func (r *RedisStore) key(account string) string { return r.tier.Key("{bundle:" + account + "}") }
func (r *RedisStore) versionKey(account string) string {
	return r.tier.Key("{bundle:" + account + "}:ver")
}

// legacyKey is where versions before the hash tags kept account's bundle:
// read when the current key is missing, so an upgrade does not lose the
// logins a Redis kept. Never written.
func (r *RedisStore) legacyKey(account string) string { return r.tier.Key("bundle:" + account) }

// saveScript stores a bundle unless the stored one is newer (higher token,
// or the same token and created later); it returns 1 when it stored.
//
// KEYS[1] bundle, KEYS[2] version; ARGV[1] sealed, ARGV[2] token, ARGV[3]
// created (ns).
var saveScript = redis.NewScript(`
local v = redis.call('GET', KEYS[2])
if v then
  local tok, created = string.match(v, '^(%-?%d+):(%-?%d+)$')
  tok, created = tonumber(tok), tonumber(created)
  local ntok, ncreated = tonumber(ARGV[2]), tonumber(ARGV[3])
  if tok and (tok > ntok or (tok == ntok and created > ncreated)) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2] .. ':' .. ARGV[3])
return 1
`)

// fillScript stores a bundle only where Redis has none of the account's.
//
// KEYS[1] bundle, KEYS[2] version; ARGV[1] sealed, ARGV[2] version.
var fillScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
`)

// Republish puts this replica's copies of bundles back into Redis where
// Redis has none, and returns how many it put back. Call it when Redis is
// reachable again after an outage: a Redis that came back empty (restarted
// without persistence, or a promoted replica that lacked them) has lost the
// bundles, and the replica that leases an account next may never have run
// it. A bundle Redis still has is left alone, whatever its version.
func (r *RedisStore) Republish(ctx context.Context) (int, error) {
	n := 0
	for account, e := range r.local.all() {
		err := r.tier.Do(ctx, "save_bundle", func(ctx context.Context, c redisconn.Client) error {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			put, err := fillScript.Run(ctx, c, []string{r.key(account), r.versionKey(account)},
				e.data, fmt.Sprintf("%d:%d", e.version.Token, e.version.Created.UnixNano())).Int()
			n += put
			return err
		})
		if err != nil {
			return n, fmt.Errorf("republish session bundle of %s: %w", account, err)
		}
	}
	return n, nil
}

// SaveBundle stores account's sealed bundle in Redis and keeps a local
// copy. When Redis fails the local copy alone is kept; the call still
// succeeds.
func (r *RedisStore) SaveBundle(ctx context.Context, account string, sealed []byte, v Version) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Saved after a login: it should land even if the caller goes away.
	err := r.saveRemote(context.WithoutCancel(ctx), account, sealed, v)
	if errors.Is(err, ErrStale) {
		return err
	}
	mirrored := err == nil
	if err := r.local.save(account, sealed, v, mirrored); err != nil && mirrored {
		// Redis took it: the local copy, from an older view, must follow.
		r.local.mirror(account, sealed, v)
	} else if err != nil {
		return err
	}
	return nil
}

// LoadBundle returns account's sealed bundle from Redis, or ErrNotFound. When Redis fails it answers from the local copy. A
// copy saved here while Redis was down is pushed to Redis when Redis answers
// that it has none.
func (r *RedisStore) LoadBundle(ctx context.Context, account string) ([]byte, error) {
	var data []byte
	missing := false
	// Asked also while Redis is marked down: a worker about to start
	// without its bundle would need a login.
	err := r.tier.DoNow(ctx, "load_bundle", func(ctx context.Context, c redisconn.Client) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		data, err = c.Get(ctx, r.key(account)).Bytes()
		if errors.Is(err, redis.Nil) {
			data, err = c.Get(ctx, r.legacyKey(account)).Bytes()
		}
		if errors.Is(err, redis.Nil) {
			missing, err = true, nil
		}
		return err
	})
	switch {
	case err == nil && !missing:
		r.local.mirror(account, data, Version{})
		return data, nil
	case err == nil:
		e, ok := r.local.get(account)
		if !ok || e.mirrored {
			// A mirrored copy whose original is gone was removed on purpose.
			r.local.drop(account)
			return nil, ErrNotFound
		}
		switch err := r.saveRemote(context.WithoutCancel(ctx), account, e.data, e.version); {
		case err == nil, errors.Is(err, ErrStale):
			r.local.mirror(account, e.data, e.version)
		}
		return e.data, nil
	case !errors.Is(err, redisconn.ErrUnavailable) && ctx.Err() != nil:
		return nil, ctx.Err()
	}
	e, ok := r.local.get(account)
	if !ok {
		return nil, ErrNotFound
	}
	return e.data, nil
}

// saveRemote stores the bundle in Redis: ErrStale when Redis holds a newer
// one, redisconn.ErrUnavailable when Redis is marked down.
func (r *RedisStore) saveRemote(ctx context.Context, account string, sealed []byte, v Version) error {
	saved := 0
	err := r.tier.Do(ctx, "save_bundle", func(ctx context.Context, c redisconn.Client) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var err error
		saved, err = saveScript.Run(ctx, c, []string{r.key(account), r.versionKey(account)},
			sealed, v.Token, v.Created.UnixNano()).Int()
		return err
	})
	if err == nil && saved == 0 {
		return ErrStale
	}
	return err
}
