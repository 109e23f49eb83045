// Package session keeps conversation state: where each conversation's
// upstream session lives (affinity entries, taken before a follow-up turn
// and put back after a clean finish) and the stored Responses objects
// (previous_response_id chains, bounded per owner). Memory is the in-process
// store (bounded LRU caches with TTLs; a single node's store); Redis is
// shared by the replicas, with a Memory as its local tier for while Redis is
// away, and its health tracked and logged once. Redis lends its connection
// and health to the stores kept beside it (Do, Key: session/bundle's sealed
// bundles). The router and the Responses handler depend on small interfaces
// of their own, which *Memory and *Redis satisfy; main adapts the router's
// affinity value to Affinity. It must not know about workers, leases or
// HTTP.
package session

import (
	"errors"
	"strings"
)

// ErrNotFound is returned when a key does not exist (redis.Nil translates to it).
var ErrNotFound = errors.New("not found")

// ErrTooLarge is returned by SaveResponse when one object is bigger than the
// in-memory store's whole byte budget.
var ErrTooLarge = errors.New("response larger than the store's byte budget")

// Affinity says where a conversation's upstream session lives: the pool
// instance that served the earlier turns and the session id it returned.
type Affinity struct {
	Instance  string `json:"i"`
	SessionID string `json:"s"`
	Model     string `json:"m,omitempty"`
}

// ownedBy reports whether an affinity key "<owner>:<conversation>" belongs to
// owner; the empty owner matches every key.
func ownedBy(key, owner string) bool {
	if owner == "" {
		return true
	}
	return len(key) > len(owner) && key[len(owner)] == ':' && strings.HasPrefix(key, owner)
}
