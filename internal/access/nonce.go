package access

import (
	"errors"
	"sync"
)

// maxNonces bounds the nonces a replica remembers: hops live at most
// hopLifetime+maxSkew (a minute), so this admits about two thousand hops a
// second into one replica, far above what its workers serve; each costs
// about 60 bytes.
const maxNonces = 1 << 17

// Errors of the nonce memory.
var (
	errReplayed   = errors.New("its nonce was used before: a replayed hop")
	errTooManyHop = errors.New("this replica remembers too many hops in flight; retry in a few seconds")
)

// nonces remembers the nonces of accepted hops until they expire, in a
// bounded map and a queue in the order they came (which is nearly their
// expiry's: every hop lives the same time, give or take the clocks). It
// lives in the process: a hop names the receiving replica's run, which a
// restart changes, so no hop accepted before a restart is accepted after
// it, and no store (Redis, which an attacker who reached it could clear)
// is asked on a request's path.
type nonces struct {
	mu    sync.Mutex
	max   int
	seen  map[string]int64 // nonce -> expiry, Unix ms
	queue []nonceEntry     // in arrival order, from head on
	head  int
}

type nonceEntry struct {
	nonce string
	exp   int64
}

func newNonces(max int) *nonces {
	return &nonces{max: max, seen: make(map[string]int64)}
}

// add remembers nonce until exp, or says why it is refused: seen before
// and not expired, or the memory is full of hops that have not expired.
func (n *nonces) add(nonce string, exp, now int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.prune(now)
	if e, ok := n.seen[nonce]; ok && e > now {
		return errReplayed
	}
	if len(n.seen) >= n.max {
		n.sweep(now)
		if len(n.seen) >= n.max {
			return errTooManyHop
		}
	}
	n.seen[nonce] = exp
	n.queue = append(n.queue, nonceEntry{nonce, exp})
	return nil
}

// prune forgets the expired nonces at the head of the queue, and moves
// the queue to the front of its array once the head passed half of it (so
// each entry is copied a bounded number of times).
func (n *nonces) prune(now int64) {
	for ; n.head < len(n.queue) && n.queue[n.head].exp <= now; n.head++ {
		if e := n.queue[n.head]; n.seen[e.nonce] == e.exp {
			delete(n.seen, e.nonce)
		}
		n.queue[n.head] = nonceEntry{}
	}
	if n.head > 0 && n.head >= len(n.queue)/2 {
		n.queue = append(n.queue[:0], n.queue[n.head:]...)
		n.head = 0
	}
}

// sweep forgets every expired nonce, wherever it sits in the queue (a
// sender whose clock runs behind puts early expiries behind later ones).
func (n *nonces) sweep(now int64) {
	kept := n.queue[:0]
	for _, e := range n.queue[n.head:] {
		switch {
		case e.exp > now:
			kept = append(kept, e)
		case n.seen[e.nonce] == e.exp:
			delete(n.seen, e.nonce)
		}
	}
	clear(n.queue[len(kept):])
	n.queue, n.head = kept, 0
}
