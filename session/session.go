// Package session keeps conversation state: where each conversation's
// upstream session lives (the router's route.Affinity entries, taken before a
// follow-up turn and put back after a clean finish) and the stored Responses
// objects (previous_response_id chains, bounded per owner). Memory is the
// in-process store (bounded LRU caches with TTLs; a single node's store);
// Redis is shared by the replicas, with a Memory as its local tier for while
// Redis is away, and its health tracked and logged once by its
// redisconn.Conn, which it lends to the stores kept beside it (Conn:
// session/bundle's sealed bundles). Both are adapters of ports their
// consumers own below them: the router's route.AffinityStore (with its
// route.Affinity value and route.AffinityKey, which the stores keep as they
// are and read only the owner of), and the Responses handler's small Store
// interface. Stores sit above routing: session knows the router's affinity
// value, but not workers, leases or HTTP.
package session

import (
	"errors"

	"github.com/poolgate/poolgate/pool/route"
)

// ErrNotFound is returned when a key does not exist (redis.Nil translates to it).
var ErrNotFound = errors.New("not found")

// ErrTooLarge is returned by SaveResponse when one object is bigger than the
// in-memory store's whole byte budget.
var ErrTooLarge = errors.New("response larger than the store's byte budget")

var (
	_ route.AffinityStore = (*Memory)(nil)
	_ route.AffinityStore = (*Redis)(nil)
)
