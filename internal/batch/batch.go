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
type Writer[T any] struct {
	cfg     Config
	flush   func(context.Context, []T) error
	in      chan T
	done    chan struct{}
	once    sync.Once
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
	w := &Writer[T]{cfg: cfg, flush: flush, in: make(chan T, cfg.Queue), done: make(chan struct{})}
	go w.run()
	return w
}

// Add queues v; it reports false (and counts it) when the queue is full.
func (w *Writer[T]) Add(v T) bool {
	select {
	case w.in <- v:
		return true
	default:
		w.dropped.Add(1)
		return false
	}
}

// Dropped counts the values Add refused.
func (w *Writer[T]) Dropped() int64 { return w.dropped.Load() }

// Close flushes what waits and stops the Writer. Add must not be called
// after Close.
func (w *Writer[T]) Close() {
	w.once.Do(func() { close(w.in) })
	<-w.done
}

func (w *Writer[T]) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	buf := make([]T, 0, w.cfg.Size)
	send := func() {
		if len(buf) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		if err := w.flush(ctx, buf); err != nil && w.cfg.OnError != nil {
			w.cfg.OnError(err, len(buf))
		}
		cancel()
		clear(buf)
		buf = buf[:0]
	}
	for {
		select {
		case v, ok := <-w.in:
			if !ok {
				send()
				return
			}
			buf = append(buf, v)
			if len(buf) >= w.cfg.Size {
				send()
			}
		case <-t.C:
			send()
		}
	}
}
