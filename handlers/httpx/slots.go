package httpx

import (
	"context"
	"runtime"
	"time"
)

// Slots bounds work done at once on the request's goroutine (the protocols'
// token counts): a caller waits up to a fixed time for a slot, then is
// refused. It is safe for concurrent use.
type Slots struct {
	ch   chan struct{}
	wait time.Duration
}

// NewSlots returns n slots (default GOMAXPROCS) that a caller waits up to
// wait for (default 5s).
func NewSlots(n int, wait time.Duration) *Slots {
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	if wait <= 0 {
		wait = 5 * time.Second
	}
	return &Slots{ch: make(chan struct{}, n), wait: wait}
}

// Take waits, bounded by the slots' wait and ctx, for a slot; true when it
// has one, which the caller gives back with Release.
func (s *Slots) Take(ctx context.Context) bool {
	select {
	case s.ch <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(s.wait)
	defer t.Stop()
	select {
	case s.ch <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// Release gives back a slot Take returned.
func (s *Slots) Release() { <-s.ch }

// Held is how many slots are taken now.
func (s *Slots) Held() int { return len(s.ch) }
