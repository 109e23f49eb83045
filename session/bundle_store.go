package session

import (
	"context"
	"errors"
	"time"
)

// bundleTimeout bounds each bundle call to Redis. Bundles are rare and larger
// than affinity entries, and a worker start waits for one, so it is longer
// than the affinity deadline.
const bundleTimeout = time.Second

// bundleEntry is a stored sealed bundle; mirrored is true when the copy is
// also in Redis (always false in a plain Memory store).
type bundleEntry struct {
	data     []byte
	mirrored bool
}

// SaveBundle stores a copy of the sealed bundle of account, replacing the
// previous one. Bundles have no TTL: the manifest inside carries the expiry.
func (m *Memory) SaveBundle(_ context.Context, account string, sealed []byte) error {
	m.saveBundle(account, sealed, false)
	return nil
}

// LoadBundle returns a copy of account's sealed bundle, or ErrNotFound.
func (m *Memory) LoadBundle(_ context.Context, account string) ([]byte, error) {
	data, _, err := m.loadBundle(account)
	return data, err
}

func (m *Memory) saveBundle(account string, sealed []byte, mirrored bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bundles == nil {
		m.bundles = make(map[string]bundleEntry)
	}
	m.bundles[account] = bundleEntry{data: append([]byte(nil), sealed...), mirrored: mirrored}
}

func (m *Memory) loadBundle(account string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.bundles[account]
	if !ok {
		return nil, false, ErrNotFound
	}
	return append([]byte(nil), e.data...), e.mirrored, nil
}

func (m *Memory) dropBundle(account string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.bundles, account)
}

// bundleKey is the key family of sealed session bundles, one per account.
func (r *Redis) bundleKey(account string) string { return r.cfg.Prefix + "bundle:" + account }

// SaveBundle stores account's sealed bundle in Redis, without TTL, and keeps
// a local copy. When Redis fails the local copy alone is kept (and pushed to
// Redis by a later LoadBundle on this replica); the call still succeeds.
func (r *Redis) SaveBundle(ctx context.Context, account string, sealed []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	mirrored := false
	if r.health.allow() {
		// Saved after a login: it should land even if the caller goes away.
		if err := r.saveBundleRemote(context.WithoutCancel(ctx), account, sealed); err == nil {
			r.health.success()
			mirrored = true
		} else {
			r.failed(context.Background(), "save_bundle", err)
		}
	} else {
		r.skipped("save_bundle")
	}
	r.local.saveBundle(account, sealed, mirrored)
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
		r.local.saveBundle(account, data, true)
		return data, nil
	case errors.Is(err, ErrNotFound):
		r.health.success()
		data, mirrored, lerr := r.local.loadBundle(account)
		if lerr != nil || mirrored {
			// A mirrored copy whose original is gone was removed on purpose.
			r.local.dropBundle(account)
			return nil, ErrNotFound
		}
		if err := r.saveBundleRemote(context.WithoutCancel(ctx), account, data); err == nil {
			r.local.saveBundle(account, data, true)
		} else {
			r.failed(context.Background(), "save_bundle", err)
		}
		return data, nil
	default:
		if !r.failed(ctx, op, err) {
			return nil, ctx.Err()
		}
	}
	data, _, err = r.local.loadBundle(account)
	return data, err
}

func (r *Redis) saveBundleRemote(ctx context.Context, account string, sealed []byte) error {
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	return r.client.Set(ctx, r.bundleKey(account), sealed, 0).Err()
}

func (r *Redis) loadBundleRemote(ctx context.Context, account string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, bundleTimeout)
	defer cancel()
	b, err := r.client.Get(ctx, r.bundleKey(account)).Bytes()
	return b, remoteErr(err)
}
