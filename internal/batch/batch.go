// Package batch moves writes off the request path: a Writer takes values
// without blocking and hands them to a flush function in batches, from one
// goroutine of its own. A batch whose flush failed is held and tried again,
// before any newer one, until it goes through, so a store that is away for
// a while (a Redis failover) loses nothing within the Writer's bounds; what
// those bounds cost is counted, and an outage is reported once, not once per
// value.
package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Config tunes a Writer. Zero values take the defaults.
type Config struct {
	// Queue is how many values may wait to be batched; beyond it Add
	// drops. Default 4096.
	Queue int
	// Size flushes a batch once it holds this many values. Default 256.
	Size int
	// Every flushes what waits at least this often. Default 200 ms.
	Every time.Duration
	// Timeout bounds each flush. Default 2 s.
	Timeout time.Duration
	// Hold is how many values of batches that failed may be held to be
	// tried again; beyond it the oldest held batches are dropped. Default
	// 65536.
	Hold int
	// Retry is how long after a failed flush the held batches are tried
	// again. Default 1 s.
	Retry time.Duration
	// OnError receives each failed flush's error and batch size. Default
	// none.
	OnError func(err error, n int)
	// OnOutage is called at the first failed flush after a good one (once
	// per outage), with its error. Default none.
	OnOutage func(err error)
	// OnRecover is called once every held batch went through after an
	// outage, with how many values were written late and how many were
	// dropped meanwhile. Default none.
	OnRecover func(late, dropped int)
	// OnHeld receives how many values are held after each change. Default
	// none.
	OnHeld func(n int)
	// OnDrop receives each number of values dropped: by Add on a full
	// queue, past Hold, or by Close with values still held. Default none.
	OnDrop func(n int)
}

// Flush writes one batch. seq numbers a Writer's batches from 1 up in the
// order they are written. A batch tried again keeps its seq, and a batch is
// tried only once every earlier one went through or was dropped, so a store
// that cannot tell whether a failed write landed (a connection lost after
// the command went out) can apply each seq at most once by remembering the
// highest it applied for this Writer.
type Flush[T any] func(ctx context.Context, seq uint64, vals []T) error

// Writer batches values for flush. Its methods are safe for concurrent use.
//
// Add only appends under a lock: the Writer's goroutine is woken when a
// batch is full, or by its clock, never once per value, so a request that
// records something hands no work to another goroutine.
type Writer[T any] struct {
	cfg   Config
	flush Flush[T]
	full  chan struct{} // a batch is ready (1-buffered)
	done  chan struct{}
	stop  chan struct{}
	once  sync.Once
	lost  int // values Close could not write

	mu      sync.Mutex
	pending []T
	closed  bool

	dropped atomic.Int64
	nheld   atomic.Int64

	// Owned by the Writer's goroutine.
	held     []held[T] // batches cut and not yet written, oldest first
	seq      uint64    // the newest batch's
	failing  bool      // the last flush failed
	retryAt  time.Time // when a failing Writer tries again
	late     int       // values written after the outage began
	lostNow  int       // values dropped since the outage began
	spare    []T       // the next pending slice
	lastBack []T       // the backing array of the newest cut
}

type held[T any] struct {
	seq   uint64
	vals  []T
	tried bool // a flush of it failed: it may have landed, so it is never merged
}

// New starts a Writer; Close stops it.
func New[T any](cfg Config, flush Flush[T]) *Writer[T] {
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
	if cfg.Hold <= 0 {
		cfg.Hold = 65536
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
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
		w.drop(1)
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

// Dropped counts the values dropped: refused by Add, pushed out past Hold,
// or still held at Close.
func (w *Writer[T]) Dropped() int64 { return w.dropped.Load() }

// Held is how many values wait to be tried again after a failed flush.
func (w *Writer[T]) Held() int { return int(w.nheld.Load()) }

// Close tries once more to write what waits and is held, stops the Writer
// and returns how many values it could not write (also counted as dropped).
// Add must not be called after Close.
func (w *Writer[T]) Close() int {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return w.lost
}

func (w *Writer[T]) drop(n int) {
	if n == 0 {
		return
	}
	w.dropped.Add(int64(n))
	if w.cfg.OnDrop != nil {
		w.cfg.OnDrop(n)
	}
}

func (w *Writer[T]) run() {
	defer close(w.done)
	t := time.NewTicker(w.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-w.full:
			w.cut(false)
			w.send(false)
		case <-t.C:
			w.cut(true)
			w.send(false)
		case <-w.stop:
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.cut(true)
			w.send(true)
			w.giveUp()
			return
		}
	}
}

// cut moves what waits into held batches of at most Size: all of it, or
// only the full batches, leaving the rest to wait for more or for the
// clock. While earlier batches are held, values fill the newest held batch
// first if no flush tried it yet, so an outage costs few round trips when
// it ends.
func (w *Writer[T]) cut(all bool) {
	if w.spare == nil {
		w.spare = make([]T, 0, w.cfg.Size)
	}
	w.mu.Lock()
	vals := w.pending
	if k := len(vals) / w.cfg.Size * w.cfg.Size; !all && k < len(vals) {
		w.pending = append(w.spare[:0], vals[k:]...)
		vals = vals[:k]
	} else {
		w.pending = w.spare[:0]
	}
	w.mu.Unlock()
	w.spare = nil
	if len(vals) == 0 {
		w.spare = vals[:0]
		return
	}
	w.lastBack = vals
	if n := len(w.held); n > 0 && !w.held[n-1].tried && len(w.held[n-1].vals) < w.cfg.Size {
		last := &w.held[n-1]
		k := min(w.cfg.Size-len(last.vals), len(vals))
		last.vals = append(last.vals, vals[:k]...)
		vals = vals[k:]
		w.lastBack = nil // its values live on in another array
	}
	for len(vals) > 0 {
		n := min(len(vals), w.cfg.Size)
		w.seq++
		w.held = append(w.held, held[T]{seq: w.seq, vals: vals[:n:n]})
		vals = vals[n:]
	}
	w.bound()
}

// bound drops the oldest held batches while more than Hold values are held.
func (w *Writer[T]) bound() {
	n := 0
	for _, b := range w.held {
		n += len(b.vals)
	}
	for n > w.cfg.Hold && len(w.held) > 1 {
		k := len(w.held[0].vals)
		w.pop()
		n -= k
		w.lostNow += k
		w.drop(k)
	}
	w.setHeld(n)
}

func (w *Writer[T]) pop() {
	clear(w.held[0].vals)
	w.held[0] = held[T]{}
	w.held = w.held[1:]
}

func (w *Writer[T]) setHeld(n int) {
	if int64(n) == w.nheld.Swap(int64(n)) {
		return
	}
	if w.cfg.OnHeld != nil {
		w.cfg.OnHeld(n)
	}
}

// send writes the held batches, oldest first, and stops at the first that
// fails. A failing Writer waits Retry between tries, except the last one,
// at Close.
func (w *Writer[T]) send(last bool) {
	if w.failing && !last && time.Now().Before(w.retryAt) {
		return
	}
	for len(w.held) > 0 {
		b := &w.held[0]
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Timeout)
		err := w.flush(ctx, b.seq, b.vals)
		cancel()
		if err != nil {
			b.tried = true
			w.failed(err, len(b.vals))
			return
		}
		if w.failing {
			w.late += len(b.vals)
		}
		w.pop()
	}
	w.setHeld(0)
	if w.failing {
		w.failing = false
		if w.cfg.OnRecover != nil {
			w.cfg.OnRecover(w.late, w.lostNow)
		}
		w.late, w.lostNow = 0, 0
	}
	if back := w.lastBack; back != nil && cap(back) <= w.cfg.Size {
		// Every batch went through: the newest cut's array is free again
		// (a burst's larger one is not kept).
		clear(back[:cap(back)])
		w.spare = back[:0]
	}
	w.lastBack = nil
}

func (w *Writer[T]) failed(err error, n int) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err, n)
	}
	if !w.failing {
		w.failing = true
		if w.cfg.OnOutage != nil {
			w.cfg.OnOutage(err)
		}
	}
	w.retryAt = time.Now().Add(w.cfg.Retry)
	total := 0
	for _, b := range w.held {
		total += len(b.vals)
	}
	w.setHeld(total)
}

// giveUp drops what Close could not write.
func (w *Writer[T]) giveUp() {
	n := 0
	for len(w.held) > 0 {
		n += len(w.held[0].vals)
		w.pop()
	}
	w.lost = n
	w.setHeld(0)
	w.drop(n)
}
