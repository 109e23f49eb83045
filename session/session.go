// Package session keeps poolgate's shared state: conversation affinity, stored
// Responses objects and sealed session bundles, behind one store interface
// with an in-memory implementation (the embedded default) and a Redis one.
// It knows nothing about HTTP.
//
// The router (package pool) takes an affinity entry before a follow-up turn and
// puts one back after a clean finish; the Responses handler saves and loads
// stored response objects. Both depend on small interfaces they define
// themselves, which *Memory and *Redis satisfy.
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
