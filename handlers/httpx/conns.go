package httpx

import (
	"container/list"
	"context"
	"net"
	"sync"
)

// ConnGuard bounds how many of one listener's connections may be open
// without having presented a credential: from accept until a request on
// the connection is authorized with a key or token (Trust). Past Max, the
// oldest such connection is closed to make room, so connections that
// dribble their headers (a slow-loris) or sit on a public route cannot use
// up the process's file descriptors, and a new connection, a keyed
// client's among them, always gets in: it has until Max newer connections
// arrive to present its credential, which takes one request. A connection
// that presented one is no longer counted: the server's IdleTimeout bounds
// it.
type ConnGuard struct {
	max     int
	onEvict func() // counts a closed connection; may be nil

	mu        sync.Mutex
	untrusted list.List // *guardedConn, oldest first
}

// NewConnGuard returns a guard of limit untrusted connections (at least 1);
// onEvict, if not nil, is called for each connection it closes.
func NewConnGuard(limit int, onEvict func()) *ConnGuard {
	return &ConnGuard{max: max(limit, 1), onEvict: onEvict}
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

// Untrusted is the number of connections counted now.
func (g *ConnGuard) Untrusted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.untrusted.Len()
}

type connKey struct{}

// Trust says the request of ctx presented a credential: its connection is
// no longer counted, nor closed to make room.
func Trust(ctx context.Context) {
	if gc, ok := ctx.Value(connKey{}).(*guardedConn); ok {
		gc.g.forget(gc)
	}
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

// guardedConn is an accepted connection; el is its place among the
// untrusted ones, nil once trusted or closed.
type guardedConn struct {
	net.Conn
	g  *ConnGuard
	el *list.Element
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

// add counts c, closing the oldest untrusted connection when there are too
// many.
func (g *ConnGuard) add(c *guardedConn) {
	g.mu.Lock()
	c.el = g.untrusted.PushBack(c)
	var evict *guardedConn
	if g.untrusted.Len() > g.max {
		evict = g.untrusted.Remove(g.untrusted.Front()).(*guardedConn)
		evict.el = nil
	}
	g.mu.Unlock()
	if evict != nil {
		_ = evict.Conn.Close() // its server goroutine ends on the read error
		if g.onEvict != nil {
			g.onEvict()
		}
	}
}

// forget stops counting c.
func (g *ConnGuard) forget(c *guardedConn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.el != nil {
		g.untrusted.Remove(c.el)
		c.el = nil
	}
}
