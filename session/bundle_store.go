package session

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// bundleTimeout bounds each bundle call to Redis. Bundles are rare and larger
// than affinity entries, and a worker start waits for one, so it is longer
// than the affinity deadline.
const bundleTimeout = time.Second

// bundleEntry is a stored sealed bundle; mirrored is true when the copy is
// also in Redis (always false in a plain Memory store).
type bundleEntry struct {
	data     []byte
	version  BundleVersion
	mirrored bool
}

// BundleVersion orders the bundles of one account: the fencing token of the
// lease under which it was saved (0 outside a cluster), then its creation
// time. A save never replaces a newer bundle: a replica that lost the lease
// (a lower token) or a stale copy (an older one) can't overwrite what the
// account's holder saved since.
type BundleVersion struct {
	Token   int64
	Created time.Time
}

// newer reports whether v is newer than w.
func (v BundleVersion) newer(w BundleVersion) bool {
	if v.Token != w.Token {
		return v.Token > w.Token
	}
	return v.Created.After(w.Created)
}

// ErrStaleBundle: a newer bundle of the account is stored already.
var ErrStaleBundle = errors.New("a newer session bundle of this account is stored")

// SaveBundle stores a copy of the sealed bundle of account unless a newer
// one (by version) is stored, then it returns ErrStaleBundle. Bundles have
// no TTL: the manifest inside carries the expiry.
func (m *Memory) SaveBundle(_ context.Context, account string, sealed []byte, v BundleVersion) error {
	return m.saveBundle(account, sealed, v, false)
}

// LoadBundle returns a copy of account's sealed bundle, or ErrNotFound.
func (m *Memory) LoadBundle(_ context.Context, account string) ([]byte, error) {
	data, _, err := m.loadBundle(account)
	return data, err
}

func (m *Memory) saveBundle(account string, sealed []byte, v BundleVersion, mirrored bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bundles == nil {
		m.bundles = make(map[string]bundleEntry)
	}
	if old, ok := m.bundles[account]; ok && old.version.newer(v) {
		return ErrStaleBundle
	}
	m.bundles[account] = bundleEntry{data: append([]byte(nil), sealed...), version: v, mirrored: mirrored}
	return nil
}

func (m *Memory) loadBundle(account string) ([]byte, bool, error) {
	e, ok := m.bundleEntry(account)
	if !ok {
		return nil, false, ErrNotFound
	}
	return e.data, e.mirrored, nil
}

func (m *Memory) bundleEntry(account string) (bundleEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.bundles[account]
	e.data = append([]byte(nil), e.data...)
	return e, ok
}

func (m *Memory) dropBundle(account string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.bundles, account)
}

// bundleKey is the key family of sealed session bundles, one per account;
// bundleVersionKey holds the stored bundle's version ("token:created ns").
func (r *Redis) bundleKey(account string) string        { return r.cfg.Prefix + "bundle:" + account }
func (r *Redis) bundleVersionKey(account string) string { return r.cfg.Prefix + "bundlever:" + account }

// saveBundleScript stores a bundle unless the stored one is newer (higher
// token, or the same token and created later); it returns 1 when it stored.
//
// KEYS[1] bundle, KEYS[2] version; ARGV[1] sealed, ARGV[2] token, ARGV[3]
// created (ns).
var saveBundleScript = redis.NewScript(`
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

// SaveBundle stores account's sealed bundle in Redis, without TTL, and keeps
// a local copy. When Redis fails the local copy alone is kept (and pushed to
// Redis by a later LoadBundle on this replica); the call still succeeds.
func (r *Redis) SaveBundle(ctx context.Context, account string, sealed []byte, v BundleVersion) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mirrored := false
	if r.health.allow() {
		// Saved after a login: it should land even if the caller goes away.
		err := r.saveBundleRemote(context.WithoutCancel(ctx), account, sealed, v)
		switch {
		case errors.Is(err, ErrStaleBundle):
			r.health.success()
			return err
		case err == nil:
			r.health.success()
			mirrored = true
		default:
			r.failed(context.Background(), "save_bundle", err)
		}
	} else {
		r.skipped("save_bundle")
	}
	if err := r.local.saveBundle(account, sealed, v, mirrored); err != nil && mirrored {
		// Redis took it: the local copy, from an older view, must follow.
		r.local.dropBundle(account)
		return r.local.saveBundle(account, sealed, v, true)
	} else if err != nil {
		return err
	}
	return nil
}

// LoadBundle returns account's sealed bundle from Redis, or ErrNotFound.
// When Redis fails it answers from the local copy. A copy saved here while
// Redis was down is pushed to Redis when Redis answers that it has none.
func (r *Redis) LoadBundle(ctx context.Context, account string) ([]byte, error) {
	const op = "load_bundle"
	if !r.health.allow() {
		r.skipped(op)
		data, _, err := r.local.loadBundle(account)
		return data, err
	}
	data, err := r.loadBundleRemote(ctx, account)
	switch {
	case err == nil:
		r.health.success()
		r.local.dropBundle(account)
		_ = r.local.saveBundle(account, data, BundleVersion{}, true)
		return data, nil
	case errors.Is(err, ErrNotFound):
		r.health.success()
		e, ok := r.local.bundleEntry(account)
		if !ok || e.mirrored {
			// A mirrored copy whose original is gone was removed on purpose.
			r.local.dropBundle(account)
			return nil, ErrNotFound
		}
		switch err := r.saveBundleRemote(context.WithoutCancel(ctx), account, e.data, e.version); {
		case err == nil, errors.Is(err, ErrStaleBundle):
			r.local.dropBundle(account)
			_ = r.local.saveBundle(account, e.data, e.version, true)
		default:
			r.failed(context.Background(), "save_bundle", err)
		}
		return e.data, nil
	default:
		if !r.failed(ctx, op, err) {
			return nil, ctx.Err()
		}
	}
	data, _, err = r.local.loadBundle(account)
	return data, err
}

func (r *Redis) saveBundleRemote(ctx context.Context, account string, sealed []byte, v BundleVersion) error {
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	stored, err := saveBundleScript.Run(ctx, r.client, []string{r.bundleKey(account), r.bundleVersionKey(account)},
		sealed, v.Token, v.Created.UnixNano()).Int()
	if err != nil {
		return err
	}
	if stored == 0 {
		return ErrStaleBundle
	}
	return nil
}

func (r *Redis) loadBundleRemote(ctx context.Context, account string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	b, err := r.client.Get(ctx, r.bundleKey(account)).Bytes()
	return b, remoteErr(err)
}
