// Package batch moves writes off the request path: a Writer takes values
// without blocking and hands them to a flush function in batches, from one
// goroutine of its own.
package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Writer. Zero values take the defaults.
type Config struct {
	// Queue is how many values may wait; beyond it Add drops. Default 4096.
	Queue int
	// Size flushes a batch once it holds this many values. Default 256.
	Size int
	// Every flushes what waits at least this often. Default 200 ms.
	Every time.Duration
	// Timeout bounds each flush. Default 2 s.
	Timeout time.Duration
	// OnError receives a failed flush's error and batch size. Default none.
	OnError func(err error, n int)
}

// Writer batches values for flush. Its methods are safe for concurrent use.
//
// Add only appends under a lock: the Writer's goroutine is woken when a
// batch is full, or by its clock, never once per value, so a request that
// records something hands no work to another goroutine.
type Writer[T any] struct {
	cfg   Config
	flush func(context.Context, []T) error
	full  chan struct{} // a batch is ready (1-buffered)
	done  chan struct{}
	stop  chan struct{}
	once  sync.Once

	mu      sync.Mutex
	pending []T
	closed  bool

	dropped atomic.Int64
}

// New starts a Writer; Close stops it.
func New[T any](cfg Config, flush func(context.Context, []T) error) *Writer[T] {
	if cfg.Queue <= 0 {
		cfg.Queue = 4096
	}
	if cfg.Size <= 0 {
		cfg.Size = 256
	}
	if cfg.Every <= 0 {
		cfg.Every = 200 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	w := &Writer[T]{cfg: cfg, flush: flush, full: make(chan struct{}, 1), done: make(chan struct{}),
		stop: make(chan struct{}), pending: make([]T, 0, cfg.Size)}
	go w.run()
	return w
}

// Add queues v; it reports false (and counts it) when the queue is full.
func (w *Writer[T]) Add(v T) bool {
	w.mu.Lock()
	if w.closed || len(w.pending) >= w.cfg.Queue {
		w.mu.Unlock()
		w.dropped.Add(1)
		return false
	}
	w.pending = append(w.pending, v)
	ready := len(w.pending)%w.cfg.Size == 0
	w.mu.Unlock()
	if ready {
		select {
		case w.full <- struct{}{}:
		default:
		}
	}
	return true
}

// Dropped counts the values Add refused.
func (w *Writer[T]) Dropped() int64 { return w.dropped.Load() }

// Close flushes what waits and stops the Writer. Add must not be called
// after Close.
func (w *Writer[T]) Close() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Writer[T]) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	spare := make([]T, 0, w.cfg.Size)
	// send flushes what waits, in batches of at most Size; unless all, only
	// the full batches, leaving the rest to wait for more or for the clock.
	send := func(all, last bool) {
		w.mu.Lock()
		batch := w.pending
		if k := len(batch) / w.cfg.Size * w.cfg.Size; !all && k < len(batch) {
			w.pending = append(spare[:0], batch[k:]...)
			batch = batch[:k]
		} else {
			w.pending = spare[:0]
		}
		w.closed = w.closed || last
		w.mu.Unlock()
		for b := batch; len(b) > 0; {
			n := min(len(b), w.cfg.Size)
			ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
			if err := w.flush(ctx, b[:n]); err != nil && w.cfg.OnError != nil {
				w.cfg.OnError(err, n)
			}
			cancel()
			b = b[n:]
		}
		clear(batch[:cap(batch)])
		if cap(batch) > w.cfg.Size {
			batch = make([]T, 0, w.cfg.Size) // a burst's backlog is not kept
		}
		spare = batch[:0]
	}
	for {
		select {
		case <-w.full:
			send(false, false)
		case <-t.C:
			send(true, false)
		case <-w.stop:
			send(true, true)
			return
		}
	}
}
