package httpx

import (
	"errors"
	"io"
	"sync"
)

// Budget caps the bytes of request bodies the gateway holds at once. A
// body costs memory from the moment it is read until its request is over
// (decoded, rendered for the worker, kept for a hop), so without a cap,
// requests that each pass their own limits could together take the process
// down: the budget refuses the one that would overflow it instead, before
// its body is read.
type Budget struct {
	limit   int64
	gauge   func(float64) // reports the bytes held; may be nil
	refused func()        // counts a refusal; may be nil

	mu   sync.Mutex
	held int64
}

// NewBudget returns a budget of limit bytes; gauge, when not nil, is told
// the bytes held after each change, and refused, when not nil, each time
// the budget had no room.
func NewBudget(limit int64, gauge func(float64), refused func()) *Budget {
	return &Budget{limit: limit, gauge: gauge, refused: refused}
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Take reserves n bytes; false (and nothing reserved) when they do not fit.
func (b *Budget) Take(n int64) bool {
	b.mu.Lock()
	if b.held+n > b.limit {
		b.mu.Unlock()
		if b.refused != nil {
			b.refused()
		}
		return false
	}
	b.held += n
	held := b.held
	b.mu.Unlock()
	b.report(held)
	return true
}

// TakeUpTo reserves up to n bytes, as many as fit, and returns how many;
// 0 when none do.
func (b *Budget) TakeUpTo(n int64) int64 {
	b.mu.Lock()
	n = min(n, b.limit-b.held)
	if n <= 0 {
		b.mu.Unlock()
		if b.refused != nil {
			b.refused()
		}
		return 0
	}
	b.held += n
	held := b.held
	b.mu.Unlock()
	b.report(held)
	return n
}

// Put gives back n bytes taken before.
func (b *Budget) Put(n int64) {
	b.mu.Lock()
	b.held -= n
	held := b.held
	b.mu.Unlock()
	b.report(held)
}

// Held is the bytes reserved now.
func (b *Budget) Held() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

func (b *Budget) report(held int64) {
	if b.gauge != nil {
		b.gauge(float64(held))
	}
}

// ErrBudget is the error of a body the budget had no room for.
var ErrBudget = errors.New("the gateway holds as many request bodies as it may: retry later")

// budgetStep is the most a body of unknown length reserves at a time.
const budgetStep = 64 << 10

// Reader reads a body of unknown length (sent chunked) under b: before
// each read it reserves room for what the read may return (what is left,
// when that is less), and fails with ErrBudget when there is none. Taken is
// what it holds (the bytes read), to Put back when the request is over.
type Reader struct {
	R     io.Reader
	B     *Budget
	Taken int64
}

func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return r.R.Read(p)
	}
	room := r.B.TakeUpTo(int64(min(len(p), budgetStep)))
	if room == 0 {
		return 0, ErrBudget
	}
	n, err := r.R.Read(p[:room])
	r.B.Put(room - int64(n))
	r.Taken += int64(n)
	return n, err
}
