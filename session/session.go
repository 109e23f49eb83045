// Package session keeps poolgate's shared state: conversation affinity, stored
// Responses objects and sealed session bundles, behind one store interface
// with an in-memory implementation (the embedded default) and a Redis one.
// It knows nothing about HTTP.
package session

import "errors"

// ErrNotFound is returned when a key does not exist (redis.Nil translates to it).
var ErrNotFound = errors.New("not found")
