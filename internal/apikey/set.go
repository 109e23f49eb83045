package apikey

import (
	"crypto/subtle"
	"sync/atomic"
)

// Key is one accepted key: its secret, the name everything else shows
// (logs, metrics, usage, the dashboard; never the secret), its role ("user",
// "viewer" or "admin"; "" is a user) and its limits (0: none).
type Key struct {
	Name         string
	Secret       string
	Role         string
	RPM          int
	Concurrency  int
	TokensPerDay int64
}

// Limited reports whether any limit is set.
func (k *Key) Limited() bool { return k.RPM > 0 || k.Concurrency > 0 || k.TokensPerDay > 0 }

// Set is an immutable list of keys. The empty Set accepts nobody; whether
// that means "auth off" is the caller's decision (Len() == 0).
type Set struct {
	keys []Key
}

// NewSet returns a Set of a copy of keys.
func NewSet(keys []Key) *Set {
	return &Set{keys: append([]Key(nil), keys...)}
}

// Len is the number of keys.
func (s *Set) Len() int { return len(s.keys) }

// Names are the keys' names, in order.
func (s *Set) Names() []string {
	out := make([]string, len(s.keys))
	for i := range s.keys {
		out[i] = s.keys[i].Name
	}
	return out
}

// Roles are the keys' roles, in order.
func (s *Set) Roles() []string {
	out := make([]string, len(s.keys))
	for i := range s.keys {
		out[i] = s.keys[i].Role
	}
	return out
}

// Lookup returns the key whose secret is secret. Like Match, it compares
// every key in constant time, so how long it takes says nothing about which
// key came close. The empty secret matches nothing.
func (s *Set) Lookup(secret string) (*Key, bool) {
	if secret == "" {
		return nil, false
	}
	found := -1
	for i := range s.keys {
		eq := subtle.ConstantTimeCompare([]byte(secret), []byte(s.keys[i].Secret))
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return nil, false
	}
	return &s.keys[found], true
}

// Registry holds the Set in force. A reload stores a new one; a request
// keeps the key it was admitted with until it ends.
type Registry struct {
	p atomic.Pointer[Set]
}

// NewRegistry returns a Registry holding keys.
func NewRegistry(keys []Key) *Registry {
	r := &Registry{}
	r.Store(keys)
	return r
}

// Load returns the Set in force.
func (r *Registry) Load() *Set { return r.p.Load() }

// Store puts keys in force.
func (r *Registry) Store(keys []Key) { r.p.Store(NewSet(keys)) }
