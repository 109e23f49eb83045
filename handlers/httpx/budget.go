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
// its body is read. One API key may hold only its share of the budget (per
// key), so a key that announces bodies it never sends, or sends them and
// never reads the answers, cannot leave the other keys none.
type Budget struct {
	limit   int64
	perKey  int64
	gauge   func(float64) // reports the bytes held; may be nil
	refused func()        // counts a refusal; may be nil

	mu    sync.Mutex
	held  int64
	byKey map[string]int64
}

// NewBudget returns a budget of limit bytes of which one key may hold
// perKey (0 or more than limit: all of it); gauge, when not nil, is told
// the bytes held after each change, and refused, when not nil, each time
// the budget had no room.
func NewBudget(limit, perKey int64, gauge func(float64), refused func()) *Budget {
	if perKey <= 0 || perKey > limit {
		perKey = limit
	}
	return &Budget{limit: limit, perKey: perKey, gauge: gauge, refused: refused, byKey: map[string]int64{}}
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// PerKey is what one key may hold of it.
func (b *Budget) PerKey() int64 { return b.perKey }

// Take reserves n bytes for key ("" for a caller of no key: the budget's
// whole room is its); false (and nothing reserved) when they do not fit.
func (b *Budget) Take(key string, n int64) bool {
	return b.TakeUpTo(key, n, n) == n
}

// TakeUpTo reserves up to n bytes for key, as many as fit, and returns how
// many; 0 (and nothing reserved) when fewer than least fit.
func (b *Budget) TakeUpTo(key string, least, n int64) int64 {
	b.mu.Lock()
	room := b.limit - b.held
	if key != "" {
		room = min(room, b.perKey-b.byKey[key])
	}
	if n = min(n, room); n <= 0 || n < least {
		b.mu.Unlock()
		if b.refused != nil {
			b.refused()
		}
		return 0
	}
	b.held += n
	if key != "" {
		b.byKey[key] += n
	}
	held := b.held
	b.mu.Unlock()
	b.report(held)
	return n
}

// Put gives back n bytes key took before.
func (b *Budget) Put(key string, n int64) {
	b.mu.Lock()
	b.held -= n
	if key != "" {
		if b.byKey[key] -= n; b.byKey[key] <= 0 {
			delete(b.byKey, key)
		}
	}
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

// Reader reads a body of unknown length (sent chunked) under b, for Key:
// before each read it reserves room for what the read may return (what is
// left, when that is less), and fails with ErrBudget when there is none.
// Taken is what it holds (the bytes read), to Put back when the request is
// over.
type Reader struct {
	R     io.Reader
	B     *Budget
	Key   string
	Taken int64
}

func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return r.R.Read(p)
	}
	room := r.B.TakeUpTo(r.Key, 1, int64(min(len(p), budgetStep)))
	if room == 0 {
		return 0, ErrBudget
	}
	n, err := r.R.Read(p[:room])
	r.B.Put(r.Key, room-int64(n))
	r.Taken += int64(n)
	return n, err
}
