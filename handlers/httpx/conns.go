package httpx

import (
	"container/list"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Conns bounds the client connections of the listeners that share it (the
// API's and the admin's): how many are open at once (Max, below the
// process's open-file limit, so that the workers, Redis and a new client
// always find a descriptor), how many one API key holds (MaxPerKey, so one
// key cannot take them all), and, per listener (ConnGuard), how many have
// shown no credential yet. It also gives every write to a client a
// deadline (WriteTimeout). It is safe for concurrent use.
type Conns struct {
	cfg ConnConfig
	m   ConnMetrics

	mu    sync.Mutex
	open  int
	byKey map[string]int
}

// ConnConfig is what Conns bounds. Zero fields bound nothing.
type ConnConfig struct {
	// Max is the most client connections open at once over every listener
	// (the daemon's default: what the open-file limit leaves).
	Max int
	// MaxPerKey is the most connections whose latest request came with one
	// API key (the daemon's default: half of Max). Tokens, replicas and an
	// open gateway's callers count only against Max.
	MaxPerKey int
	// MaxUnauthenticated is the most connections each listener keeps open
	// before any request on them showed a credential; past it the oldest
	// is closed (at least 1).
	MaxUnauthenticated int
	// WriteTimeout bounds every write to a client that set no deadline of
	// its own (a stream sets one per write), plus a second per MiB the
	// write carries: a client that stops reading cannot hold its answer,
	// its request's body budget and its goroutine for ever.
	WriteTimeout time.Duration
}

// ConnMetrics counts what Conns does; any field may be nil.
type ConnMetrics struct {
	// Evicted counts a connection closed before it showed a credential:
	// the oldest past MaxUnauthenticated, or one past Max.
	Evicted func()
	// Refused counts a request refused because its key holds MaxPerKey
	// connections already (its connection is closed after the refusal).
	Refused func()
	// Open is told the connections open after each change.
	Open func(float64)
}

// NewConns returns the bounds of cfg, counted in m.
func NewConns(cfg ConnConfig, m ConnMetrics) *Conns {
	cfg.MaxUnauthenticated = max(cfg.MaxUnauthenticated, 1)
	return &Conns{cfg: cfg, m: m, byKey: map[string]int{}}
}

// Guard returns the guard of one listener, under c's bounds.
func (c *Conns) Guard() *ConnGuard { return &ConnGuard{c: c} }

// Open is the number of connections open now.
func (c *Conns) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}

// ConnGuard is one listener's part of Conns: it counts the listener's
// connections from accept until a request on the connection is authorized
// with a key or token (Trust). Past MaxUnauthenticated of them, or when the
// gateway has Max open, the oldest such connection is closed to make room,
// so connections that dribble their headers (a slow-loris) or sit on a
// public route cannot use up the process's file descriptors, and a new
// connection, a keyed client's among them, gets in: it has until newer
// connections push it out to present its credential, which takes one
// request. When every open connection has shown a credential, the new one
// is closed instead. A connection that presented one counts against its
// key's MaxPerKey until it closes; the server's IdleTimeout bounds it
// while idle.
type ConnGuard struct {
	c         *Conns
	untrusted list.List // *guardedConn, oldest first; under c.mu
}

// NewConnGuard returns the guard of a listener of its own, bounded only in
// connections that showed no credential (limit, at least 1); onEvict, if
// not nil, is called for each connection it closes.
func NewConnGuard(limit int, onEvict func()) *ConnGuard {
	return NewConns(ConnConfig{MaxUnauthenticated: limit}, ConnMetrics{Evicted: onEvict}).Guard()
}

// Listen wraps l: every connection it accepts counts as untrusted.
func (g *ConnGuard) Listen(l net.Listener) net.Listener { return &guardedListener{Listener: l, g: g} }

// ConnContext is the http.Server's ConnContext: it lets Trust find a
// request's connection.
func (g *ConnGuard) ConnContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*guardedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// Untrusted is the number of this listener's connections that showed no
// credential yet.
func (g *ConnGuard) Untrusted() int {
	g.c.mu.Lock()
	defer g.c.mu.Unlock()
	return g.untrusted.Len()
}

type connKey struct{}

// ErrTooManyConns is the refusal of a request whose key holds MaxPerKey
// connections already.
var ErrTooManyConns = errors.New("this API key holds as many connections as the gateway allows one key (max_conns_per_key): reuse them, or close some")

// Trust says the request of ctx presented a credential: its connection is
// no longer counted as untrusted, nor closed to make room. key names the
// API key it came with ("" for a token, a replica or an open gateway's
// caller), against whose MaxPerKey the connection counts from now on. It
// reports false when that key holds MaxPerKey other connections already:
// the caller refuses the request and closes the connection.
func Trust(ctx context.Context, key string) bool {
	gc, ok := ctx.Value(connKey{}).(*guardedConn)
	if !ok {
		return true
	}
	return gc.g.trust(gc, key)
}

type guardedListener struct {
	net.Listener
	g *ConnGuard
}

func (l *guardedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: l.g}
	l.g.add(gc)
	return gc, nil
}

// guardedConn is an accepted connection. Its fields but own are under
// the Conns' mutex: el is its place among the untrusted ones (nil once
// trusted or closed), key the API key it counts against, closed set once
// it stopped counting.
type guardedConn struct {
	net.Conn
	g      *ConnGuard
	el     *list.Element
	key    string
	closed bool
	// own is set while a write deadline set by the server or a handler
	// (a stream's, each write) is in force; net/http clears it after each
	// request.
	own atomic.Bool
}

func (c *guardedConn) Close() error {
	c.g.forget(c)
	return c.Conn.Close()
}

// CloseWrite lets net/http close a connection gracefully (a FIN before the
// close), as it does a TCP connection's.
func (c *guardedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Write writes p under the connection's own write deadline, or, when none
// is set, under WriteTimeout from now (and a second per MiB of p).
func (c *guardedConn) Write(p []byte) (int, error) {
	if d := c.g.c.cfg.WriteTimeout; d > 0 && !c.own.Load() {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(d + time.Duration(len(p)>>20)*time.Second))
	}
	return c.Conn.Write(p)
}

// SetWriteDeadline sets a deadline of the caller's own, which Write keeps
// to until it is cleared.
func (c *guardedConn) SetWriteDeadline(t time.Time) error {
	c.own.Store(!t.IsZero())
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetWriteDeadline and SetReadDeadline at once.
func (c *guardedConn) SetDeadline(t time.Time) error {
	c.own.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

// add counts c, closing the oldest untrusted connection of this listener
// when there are too many of them, or too many connections in all (c itself
// when it is the only untrusted one).
func (g *ConnGuard) add(c *guardedConn) {
	s := g.c
	s.mu.Lock()
	s.open++
	c.el = g.untrusted.PushBack(c)
	var evict []*guardedConn
	for g.untrusted.Len() > s.cfg.MaxUnauthenticated || s.cfg.Max > 0 && s.open > s.cfg.Max && g.untrusted.Len() > 0 {
		e := g.untrusted.Remove(g.untrusted.Front()).(*guardedConn)
		e.el = nil
		e.closed = true
		s.open--
		evict = append(evict, e)
	}
	open := s.open
	s.mu.Unlock()
	s.report(open)
	for _, e := range evict {
		_ = e.Conn.Close() // its server goroutine ends on the read error
		if s.m.Evicted != nil {
			s.m.Evicted()
		}
	}
}

// trust moves c from the untrusted ones to key's.
func (g *ConnGuard) trust(c *guardedConn, key string) bool {
	s := g.c
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.el != nil {
		g.untrusted.Remove(c.el)
		c.el = nil
	}
	if c.closed || c.key == key {
		return true
	}
	if key != "" && s.cfg.MaxPerKey > 0 && s.byKey[key] >= s.cfg.MaxPerKey {
		if s.m.Refused != nil {
			s.m.Refused()
		}
		return false
	}
	s.unkey(c)
	if c.key = key; key != "" {
		s.byKey[key]++
	}
	return true
}

// forget stops counting c.
func (g *ConnGuard) forget(c *guardedConn) {
	s := g.c
	s.mu.Lock()
	if c.closed {
		s.mu.Unlock()
		return
	}
	c.closed = true
	if c.el != nil {
		g.untrusted.Remove(c.el)
		c.el = nil
	}
	s.unkey(c)
	s.open--
	open := s.open
	s.mu.Unlock()
	s.report(open)
}

// unkey stops counting c against its key; s.mu held.
func (s *Conns) unkey(c *guardedConn) {
	if c.key == "" {
		return
	}
	if s.byKey[c.key]--; s.byKey[c.key] <= 0 {
		delete(s.byKey, c.key)
	}
	c.key = ""
}

func (s *Conns) report(open int) {
	if s.m.Open != nil {
		s.m.Open(float64(open))
	}
}
