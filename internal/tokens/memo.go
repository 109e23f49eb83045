package tokens

import (
	"hash/maphash"
	"sync"
)

// Memo counts tokens like Count, remembering the counts of long texts: a
// conversation sends its earlier messages again with every turn, and
// hashing a text is about a hundred times cheaper than tokenizing it. Short
// texts are counted directly. A Memo is safe for concurrent use.
type Memo struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]int
}

// memoMin is the shortest text worth remembering (shorter ones count faster
// than a map lookup pays off); memoMax bounds the entries.
const (
	memoMin = 512
	memoMax = 16384
)

// NewMemo returns an empty memo.
func NewMemo() *Memo { return &Memo{seed: maphash.MakeSeed(), m: map[uint64]int{}} }

// Count returns the token count of s.
func (c *Memo) Count(s string) int {
	if len(s) < memoMin {
		return Count(s)
	}
	h := maphash.String(c.seed, s)
	c.mu.Lock()
	n, ok := c.m[h]
	c.mu.Unlock()
	if ok {
		return n
	}
	n = Count(s)
	c.mu.Lock()
	if len(c.m) >= memoMax {
		clear(c.m)
	}
	c.m[h] = n
	c.mu.Unlock()
	return n
}
