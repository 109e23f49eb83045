package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/worker"
)

// MemoryConfig configures the in-memory store. Zero values take the defaults.
type MemoryConfig struct {
	// MaxAffinity caps the number of affinity entries; beyond it the least
	// recently put entry is evicted. Default 10000.
	MaxAffinity int
	// AffinityTTL is how long an affinity entry lives after its last put.
	// Default 30 minutes.
	AffinityTTL time.Duration
	// MaxResponses caps the number of stored response objects; beyond it the
	// least recently used is dropped. Default 1000.
	MaxResponses int
	// MaxResponseBytes caps the total size of stored response objects, in
	// bytes. Default 256 MiB.
	MaxResponseBytes int64
	// ResponseTTL is how long a response object lives when SaveResponse is
	// given a zero TTL. Default 24 hours.
	ResponseTTL time.Duration
	// SweepInterval is how often Run drops expired entries (expired entries
	// are also dropped lazily when touched). Default 1 minute.
	SweepInterval time.Duration
	// OnEvict receives every affinity entry whose upstream session is
	// abandoned: expired, pushed out by the size cap, overwritten by a
	// different value, or flushed. Taking an entry is not an eviction. It is
	// called synchronously, without locks held, from whichever call noticed
	// the eviction, so it must not block (hand the work to a goroutine with an
	// owner). Default: none.
	OnEvict func(route.Affinity)
	// Now tells the time. Default time.Now.
	Now func() time.Time
}

func (c MemoryConfig) withDefaults() MemoryConfig {
	worker.Default(&c.MaxAffinity, 10000)
	worker.Default(&c.AffinityTTL, 30*time.Minute)
	worker.Default(&c.MaxResponses, 1000)
	worker.Default(&c.MaxResponseBytes, 256<<20)
	worker.Default(&c.ResponseTTL, 24*time.Hour)
	worker.Default(&c.SweepInterval, time.Minute)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Memory is the in-process store: bounded LRU caches with TTLs for affinity
// entries and response objects. It is the embedded default when no Redis is
// configured, and the local tier of the Redis store. It is safe for
// concurrent use.
type Memory struct {
	cfg  MemoryConfig
	mu   sync.Mutex
	aff  *lru[route.Affinity]
	resp *lru[[]byte]
}

// NewMemory returns an empty in-memory store. Expired entries are dropped when
// touched; call Run to also drop untouched ones in the background.
func NewMemory(cfg MemoryConfig) *Memory {
	return &Memory{cfg: cfg.withDefaults(), aff: newLRU[route.Affinity](), resp: newLRU[[]byte]()}
}

// Run drops expired entries every SweepInterval until ctx is done.
func (m *Memory) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.sweep()
		}
	}
}

// Ping reports nil: memory is always reachable.
func (m *Memory) Ping(context.Context) error { return nil }

// Healthy reports true: memory is always reachable.
func (m *Memory) Healthy() bool { return true }

// Close does nothing; it exists so both stores can be closed alike.
func (m *Memory) Close() error { return nil }

// TakeAffinity removes and returns the entry under key, or ErrNotFound.
func (m *Memory) TakeAffinity(_ context.Context, key route.AffinityKey) (route.Affinity, error) {
	a, _, err := m.takeAffinity(string(key))
	return a, err
}

// PutAffinity stores a under key for AffinityTTL, as the most recently used.
func (m *Memory) PutAffinity(_ context.Context, key route.AffinityKey, a route.Affinity) error {
	m.putAffinity(string(key), a, false)
	return nil
}

// FlushAffinity removes every entry whose key is "<owner>:..." (all entries
// when owner is empty), reports them to OnEvict and returns how many it removed.
func (m *Memory) FlushAffinity(_ context.Context, owner string) (int, error) {
	n, _ := m.flushAffinity(owner)
	return n, nil
}

// SaveResponse stores a copy of data under id for ttl (ResponseTTL when 0);
// the responses in keep (the earlier links of its chain) live as long as it
// from now on. The store is bounded as a whole (MaxResponses,
// MaxResponseBytes), so owner is not needed to keep it bounded.
func (m *Memory) SaveResponse(_ context.Context, _, id string, data []byte, ttl time.Duration, keep ...string) error {
	return m.saveResponse(id, data, ttl, false, keep)
}

// LoadResponse returns a copy of the object stored under id, or ErrNotFound.
func (m *Memory) LoadResponse(_ context.Context, id string) ([]byte, error) {
	data, _, err := m.loadResponse(id)
	return data, err
}

// LoadResponses returns copies of several objects; a missing one is nil.
func (m *Memory) LoadResponses(_ context.Context, ids []string) ([][]byte, error) {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i], _, _ = m.loadResponse(id)
	}
	return out, nil
}

// DeleteResponse removes the object stored under id, or returns ErrNotFound.
func (m *Memory) DeleteResponse(_ context.Context, id string) error {
	_, err := m.deleteResponse(id)
	return err
}

// report hands abandoned entries to OnEvict; call it without m.mu held.
func (m *Memory) report(evicted []route.Affinity) {
	if m.cfg.OnEvict == nil {
		return
	}
	for _, a := range evicted {
		m.cfg.OnEvict(a)
	}
}

func (m *Memory) takeAffinity(key string) (route.Affinity, bool, error) {
	m.mu.Lock()
	n := m.aff.get(key)
	if n == nil {
		m.mu.Unlock()
		return route.Affinity{}, false, ErrNotFound
	}
	m.aff.remove(n)
	expired := !m.cfg.Now().Before(n.expires)
	m.mu.Unlock()
	if expired {
		if !n.mirrored {
			m.report([]route.Affinity{n.val})
		}
		return route.Affinity{}, false, ErrNotFound
	}
	return n.val, n.mirrored, nil
}

// discardAffinity drops the local copy of an entry taken from Redis, silently.
func (m *Memory) discardAffinity(key string) {
	m.mu.Lock()
	if n := m.aff.get(key); n != nil {
		m.aff.remove(n)
	}
	m.mu.Unlock()
}

func (m *Memory) putAffinity(key string, a route.Affinity, mirrored bool) {
	var evicted []route.Affinity
	m.mu.Lock()
	now := m.cfg.Now()
	if n := m.aff.get(key); n != nil {
		if !n.val.SameSession(a) && !n.mirrored {
			evicted = append(evicted, n.val)
		}
		n.val, n.mirrored, n.expires = a, mirrored, now.Add(m.cfg.AffinityTTL)
		m.aff.touch(n)
	} else {
		m.aff.add(&node[route.Affinity]{key: key, val: a, mirrored: mirrored, expires: now.Add(m.cfg.AffinityTTL)})
	}
	// Entries are ordered by their last put and share one TTL, so the back is
	// both the least recently used and the first to expire.
	for b := m.aff.back(); b != nil && (m.aff.len() > m.cfg.MaxAffinity || !now.Before(b.expires)); b = m.aff.back() {
		m.aff.remove(b)
		if !b.mirrored {
			evicted = append(evicted, b.val)
		}
	}
	m.mu.Unlock()
	m.report(evicted)
}

// takeLocalOnly removes and returns an entry that lives in this tier only
// (put while Redis was away) and has not expired, with the life it has
// left, for a write-back to Redis.
func (m *Memory) takeLocalOnly(key string) (route.Affinity, time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.aff.get(key)
	if n == nil || n.mirrored {
		return route.Affinity{}, 0, false
	}
	left := n.expires.Sub(m.cfg.Now())
	if left <= 0 {
		return route.Affinity{}, 0, false // the sweep reports it
	}
	m.aff.remove(n)
	return n.val, left, true
}

// restoreLocalOnly puts back an entry whose write-back failed, with the
// life it had left, unless the key was put again meanwhile: then the newer
// entry stays and a's session, if another, is abandoned.
func (m *Memory) restoreLocalOnly(key string, a route.Affinity, left time.Duration) {
	m.mu.Lock()
	if n := m.aff.get(key); n != nil {
		newer := n.val
		m.mu.Unlock()
		if !newer.SameSession(a) {
			m.report([]route.Affinity{a})
		}
		return
	}
	m.aff.add(&node[route.Affinity]{key: key, val: a, expires: m.cfg.Now().Add(left)})
	m.mu.Unlock()
}

// flushAffinity removes owner's entries and returns how many it removed in
// all and how many of those were local-only (not mirrored from Redis).
func (m *Memory) flushAffinity(owner string) (all, localOnly int) {
	var evicted []route.Affinity
	m.mu.Lock()
	m.aff.each(func(n *node[route.Affinity]) {
		if !route.AffinityKey(n.key).OwnedBy(owner) {
			return
		}
		m.aff.remove(n)
		all++
		if !n.mirrored {
			evicted = append(evicted, n.val)
		}
	})
	m.mu.Unlock()
	m.report(evicted)
	return all, len(evicted)
}

func (m *Memory) saveResponse(id string, data []byte, ttl time.Duration, mirrored bool, keep []string) error {
	size := int64(len(data))
	if size > m.cfg.MaxResponseBytes {
		return fmt.Errorf("save response %s: %d bytes: %w", id, size, ErrTooLarge)
	}
	worker.Default(&ttl, m.cfg.ResponseTTL)
	n := &node[[]byte]{key: id, val: append([]byte(nil), data...), size: size, mirrored: mirrored}
	m.mu.Lock()
	defer m.mu.Unlock()
	n.expires = m.cfg.Now().Add(ttl)
	if old := m.resp.get(id); old != nil {
		m.resp.remove(old)
	}
	for _, k := range keep {
		if kn := m.resp.get(k); kn != nil && m.cfg.Now().Before(kn.expires) {
			kn.expires = n.expires
			m.resp.touch(kn)
		}
	}
	m.resp.add(n)
	for b := m.resp.back(); b != nil && (m.resp.len() > m.cfg.MaxResponses || m.resp.bytes > m.cfg.MaxResponseBytes); b = m.resp.back() {
		m.resp.remove(b)
	}
	return nil
}

func (m *Memory) loadResponse(id string) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.resp.get(id)
	if n == nil {
		return nil, false, ErrNotFound
	}
	if !m.cfg.Now().Before(n.expires) {
		m.resp.remove(n)
		return nil, false, ErrNotFound
	}
	m.resp.touch(n)
	return append([]byte(nil), n.val...), n.mirrored, nil
}

func (m *Memory) deleteResponse(id string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.resp.get(id)
	if n == nil {
		return false, ErrNotFound
	}
	m.resp.remove(n)
	if !m.cfg.Now().Before(n.expires) {
		return false, ErrNotFound
	}
	return n.mirrored, nil
}

// sweep drops every expired entry.
func (m *Memory) sweep() {
	var evicted []route.Affinity
	m.mu.Lock()
	now := m.cfg.Now()
	m.aff.each(func(n *node[route.Affinity]) {
		if !now.Before(n.expires) {
			m.aff.remove(n)
			if !n.mirrored {
				evicted = append(evicted, n.val)
			}
		}
	})
	m.resp.each(func(n *node[[]byte]) {
		if !now.Before(n.expires) {
			m.resp.remove(n)
		}
	})
	m.mu.Unlock()
	m.report(evicted)
}
