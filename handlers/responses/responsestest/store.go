// Package responsestest has a hand-written fake of the responses.Store for
// the tests of the responses handler and of the packages that wire it. The
// real stores live in session.
package responsestest

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/session"
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

// SaveResponse stores a copy of data under id for ttl.
func (s *Store) SaveResponse(_ context.Context, id string, data []byte, ttl time.Duration) error {
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
	s.saves++
	for len(s.data) > max && len(s.order) > 0 {
		delete(s.data, s.order[0])
		s.order = s.order[1:]
	}
	return nil
}

// LoadResponse returns the data stored under id, or session.ErrNotFound.
func (s *Store) LoadResponse(_ context.Context, id string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[id]
	if !ok || !s.now().Before(e.expires) {
		return nil, session.ErrNotFound
	}
	return append([]byte(nil), e.data...), nil
}

// DeleteResponse removes id, or returns session.ErrNotFound.
func (s *Store) DeleteResponse(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[id]
	if !ok || !s.now().Before(e.expires) {
		return session.ErrNotFound
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
