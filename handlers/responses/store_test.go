package responses_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/session"
)

// memStore is the session package's in-memory store, the daemon's default,
// as the handler sees it: an unknown id is rsp.ErrNotFound (as the
// daemon's adapter says it), and the saves are counted.
type memStore struct {
	*session.Memory
	mu           sync.Mutex
	saves, bytes int
}

func newStore() *memStore { return &memStore{Memory: session.NewMemory(session.MemoryConfig{})} }

func (s *memStore) SaveResponse(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep ...string) error {
	s.mu.Lock()
	s.saves++
	s.bytes += len(data)
	s.mu.Unlock()
	return s.Memory.SaveResponse(ctx, owner, id, data, ttl, keep...)
}

func (s *memStore) LoadResponse(ctx context.Context, id string) ([]byte, error) {
	b, err := s.Memory.LoadResponse(ctx, id)
	return b, notFound(err)
}

func (s *memStore) DeleteResponse(ctx context.Context, id string) error {
	return notFound(s.Memory.DeleteResponse(ctx, id))
}

func notFound(err error) error {
	if errors.Is(err, session.ErrNotFound) {
		return fmt.Errorf("%w: %w", rsp.ErrNotFound, err)
	}
	return err
}

// Saves is how many times a response was saved.
func (s *memStore) Saves() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

// Bytes is the size of every response saved (nothing is evicted here).
func (s *memStore) Bytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}
