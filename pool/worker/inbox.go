package worker

import "sync"

// Inbox is a turn's queue of what its connection's reader received: it
// is unbounded, so that the reader (and with it every other turn on the
// connection) never waits for a slow consumer. Make one with NewInbox.
type Inbox[T any] struct {
	mu sync.Mutex
	q  []T
	// Wake holds a value once something was pushed and not yet taken.
	Wake chan struct{}
}

// NewInbox returns an empty inbox.
func NewInbox[T any]() *Inbox[T] { return &Inbox[T]{Wake: make(chan struct{}, 1)} }

// Push queues v and wakes the consumer.
func (in *Inbox[T]) Push(v T) {
	in.mu.Lock()
	in.q = append(in.q, v)
	in.mu.Unlock()
	select {
	case in.Wake <- struct{}{}:
	default:
	}
}

// Take returns what is queued, reusing spare's storage for the next.
func (in *Inbox[T]) Take(spare []T) []T {
	in.mu.Lock()
	q := in.q
	in.q = spare[:0]
	in.mu.Unlock()
	return q
}
