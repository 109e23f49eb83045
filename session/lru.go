package session

import "time"

// node is one cache entry, linked into its lru's recency list.
type node[V any] struct {
	prev, next *node[V]
	key        string
	val        V
	expires    time.Time
	size       int64
	// mirrored marks a local copy of an entry that also lives in Redis: the
	// Redis tier reports its eviction, so the local tier must not.
	mirrored bool
}

// lru is a map plus a recency list (front = most recently used). It is not
// safe for concurrent use; Memory guards it with its mutex. A hand-rolled list
// avoids container/list's per-entry interface boxing.
type lru[V any] struct {
	m     map[string]*node[V]
	root  node[V] // sentinel: root.next is the front, root.prev the back
	bytes int64
}

func newLRU[V any]() *lru[V] {
	l := &lru[V]{m: make(map[string]*node[V])}
	l.root.next, l.root.prev = &l.root, &l.root
	return l
}

func (l *lru[V]) len() int { return len(l.m) }

func (l *lru[V]) get(key string) *node[V] { return l.m[key] }

// back returns the least recently used node, or nil.
func (l *lru[V]) back() *node[V] {
	if l.root.prev == &l.root {
		return nil
	}
	return l.root.prev
}

func (l *lru[V]) unlink(n *node[V]) {
	n.prev.next, n.next.prev = n.next, n.prev
	n.prev, n.next = nil, nil
}

func (l *lru[V]) pushFront(n *node[V]) {
	n.prev, n.next = &l.root, l.root.next
	l.root.next.prev = n
	l.root.next = n
}

// touch moves n to the front.
func (l *lru[V]) touch(n *node[V]) {
	l.unlink(n)
	l.pushFront(n)
}

// add inserts a new node at the front; key must not be present.
func (l *lru[V]) add(n *node[V]) {
	l.m[n.key] = n
	l.bytes += n.size
	l.pushFront(n)
}

func (l *lru[V]) remove(n *node[V]) {
	l.unlink(n)
	delete(l.m, n.key)
	l.bytes -= n.size
}

// each calls fn for every node, front to back; fn may remove the node it is given.
func (l *lru[V]) each(fn func(*node[V])) {
	for n := l.root.next; n != &l.root; {
		next := n.next
		fn(n)
		n = next
	}
}
