// Package responsestest has a hand-written fake of the responses.Store for
// the tests of the responses handler and of the packages that wire it. The
// real stores live in session, behind an adapter in cmd/poolgate/internal/daemon.
package responsestest

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/handlers/responses"
)

var _ responses.Store = (*Store)(nil)

// Store is a bounded in-memory response store. It keeps at most Max records
// (default 1000), dropping the oldest; a record past its TTL is gone. The
// zero value is ready to use.
type Store struct {
	// Max is the record count bound; 0 means 1000.
	Max int
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu    sync.Mutex
	data  map[string]entry
	order []string // insertion order, for eviction
	saves int
}

type entry struct {
	data    []byte
	expires time.Time
}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// SaveResponse stores a copy of data under id for ttl, and keeps the
// responses in keep alive as long.
func (s *Store) SaveResponse(_ context.Context, _, id string, data []byte, ttl time.Duration, keep ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = make(map[string]entry)
	}
	max := s.Max
	if max == 0 {
		max = 1000
	}
	if _, ok := s.data[id]; !ok {
		s.order = append(s.order, id)
	}
	s.data[id] = entry{data: append([]byte(nil), data...), expires: s.now().Add(ttl)}
	for _, k := range keep {
		if e, ok := s.data[k]; ok {
			e.expires = s.now().Add(ttl)
			s.data[k] = e
		}
	}
	s.saves++
	for len(s.data) > max && len(s.order) > 0 {
		delete(s.data, s.order[0])
		s.order = s.order[1:]
	}
	return nil
}

// Bytes is the size of everything stored.
func (s *Store) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.data {
		n += len(e.data)
	}
	return n
}

// LoadResponse returns the data stored under id, or responses.ErrNotFound.
func (s *Store) LoadResponse(_ context.Context, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[id]
	if !ok || !s.now().Before(e.expires) {
		return nil, responses.ErrNotFound
	}
	return append([]byte(nil), e.data...), nil
}

// LoadResponses returns several; a missing one is nil.
func (s *Store) LoadResponses(ctx context.Context, ids []string) ([][]byte, error) {
	out := make([][]byte, len(ids))
	for i, id := range ids {
		out[i], _ = s.LoadResponse(ctx, id)
	}
	return out, nil
}

// DeleteResponse removes id, or returns responses.ErrNotFound.
func (s *Store) DeleteResponse(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[id]
	if !ok || !s.now().Before(e.expires) {
		return responses.ErrNotFound
	}
	delete(s.data, id)
	for i, o := range s.order {
		if o == id {
			s.order = append(s.order[:i], s.order[i+1:]...)
			break
		}
	}
	return nil
}

// Saves returns how many times SaveResponse was called.
func (s *Store) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}
