package modelserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// A chat turn does not go through net/http's client. Its transport keeps two
// goroutines per connection (one writes requests, one reads answers and
// watches the idle connection), so every turn costs hand-offs between three
// goroutines, and every open stream two goroutine stacks and a write buffer.
// A turn here is one HTTP/1.1 exchange done on the caller's goroutine: the
// request is written with one writev, the answer read from the same
// connection, which goes back to a keep-alive pool once its body was read to
// the end. Nothing runs in the background; a blocked read is interrupted by
// moving the connection's deadline into the past.
//
// The health probes (GET /v1/models) still use net/http: they are rare and
// gain nothing from this.

// idleTimeout is how long a pooled connection may stay unused; an older one
// is closed rather than reused, since servers drop idle keep-alive
// connections on their own clocks.
const idleTimeout = 90 * time.Second

// longAgo is a deadline in the past: setting it fails pending I/O at once.
var longAgo = time.Unix(1, 0)

var (
	// errHeaderTimeout: the worker did not begin its answer in HeaderTimeout.
	errHeaderTimeout = errors.New("no response headers in time")
	// errTurnTimeout: the turn's RequestTimeout passed before the answer began.
	errTurnTimeout = errors.New("turn timed out")
	// errAborted: the exchange was aborted (its context ended, or the
	// client closed).
	errAborted = errors.New("exchange aborted")
)

// conns is the keep-alive pool of the chat connections to one worker.
type conns struct {
	addr    string
	dialer  net.Dialer
	maxIdle int
	// slots caps the open connections (nil: no cap); a turn holds one
	// from dial to close.
	slots chan struct{}

	mu   sync.Mutex
	idle []*wconn // oldest first
	busy map[*wconn]struct{}
	done chan struct{} // closed by close
}

func newConns(addr string, cfg *Config) *conns {
	p := &conns{
		addr:    addr,
		dialer:  net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		maxIdle: cfg.IdleConns,
		busy:    map[*wconn]struct{}{},
		done:    make(chan struct{}),
	}
	if cfg.MaxConnsPerHost > 0 {
		p.slots = make(chan struct{}, cfg.MaxConnsPerHost)
	}
	return p
}

// wconn is one connection to the worker, and the answer being read on it.
type wconn struct {
	p      *conns
	nc     net.Conn
	br     *bufio.Reader
	since  time.Time // when it went idle
	reused bool      // it carried an earlier exchange

	// The current answer's body; eof once it was read to its end.
	body io.Reader
	eof  bool
	// stop unregisters the abort of the current exchange; aborted is set
	// once it, or the pool's close, ran.
	stop    func() bool
	aborted atomic.Bool
}

// get returns an idle connection (unless fresh), or dials a new one
// within ctx.
func (p *conns) get(ctx context.Context, fresh bool) (*wconn, error) {
	now := time.Now()
	for !fresh {
		w := p.popIdle()
		if w == nil {
			break
		}
		idle := now.Sub(w.since)
		if idle >= idleTimeout {
			w.discard()
			p.dropIdle() // the rest are older still
			break
		}
		// A worker closes keep-alive connections on its own clock (often
		// after 5s); one that sat for a while is checked first.
		if idle >= checkIdle && !alive(w.nc) {
			w.discard()
			continue
		}
		w.reused = true
		return w, nil
	}
	if p.isClosed() {
		return nil, net.ErrClosed
	}
	if p.slots != nil {
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.done:
			return nil, net.ErrClosed
		}
	}
	nc, err := p.dialer.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		p.release()
		return nil, err
	}
	w := &wconn{p: p, nc: nc, br: bufio.NewReaderSize(nc, 4<<10)}
	p.mu.Lock()
	p.busy[w] = struct{}{}
	closed := p.isClosed()
	p.mu.Unlock()
	if closed {
		w.abort() // close came after the check above: it did not see w
	}
	return w, nil
}

// popIdle takes the most recently used idle connection, marked busy; nil
// when none is idle.
func (p *conns) popIdle() *wconn {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.idle) - 1
	if n < 0 {
		return nil
	}
	w := p.idle[n]
	p.idle[n] = nil
	p.idle = p.idle[:n]
	p.busy[w] = struct{}{}
	return w
}

// isClosed says whether close was called.
func (p *conns) isClosed() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// checkIdle is how long a connection may sit idle before get checks that
// the worker has not closed it.
const checkIdle = time.Second

// alive says whether an idle connection still looks open: the worker has
// neither closed it nor sent anything unasked. It costs one non-blocking
// peek at the socket.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true
	})
	return err == nil && open
}

// dropIdle closes every idle connection.
func (p *conns) dropIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, w := range idle {
		w.discard()
	}
}

// release frees a connection's slot.
func (p *conns) release() {
	if p.slots != nil {
		<-p.slots
	}
}

// put returns a connection whose answer was read to its end; it is closed
// instead when the pool is full or closed.
func (p *conns) put(w *wconn) {
	w.body, w.eof, w.stop = nil, false, nil
	w.since = time.Now()
	p.mu.Lock()
	delete(p.busy, w)
	if !p.isClosed() && len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.discard()
}

// discard closes the connection for good.
func (w *wconn) discard() {
	w.p.mu.Lock()
	delete(w.p.busy, w)
	w.p.mu.Unlock()
	w.nc.Close()
	w.p.release()
}

// abort fails the connection's pending and future I/O.
func (w *wconn) abort() {
	w.aborted.Store(true)
	_ = w.nc.SetDeadline(longAgo)
}

// setDeadline moves the connection's deadline, unless it was aborted: an
// abort that raced with this call still wins.
func (w *wconn) setDeadline(t time.Time) error {
	return w.unlessAborted(w.nc.SetDeadline(t))
}

// setReadDeadline is setDeadline for reads only.
func (w *wconn) setReadDeadline(t time.Time) error {
	return w.unlessAborted(w.nc.SetReadDeadline(t))
}

// unlessAborted follows a deadline change (whose error is err): if an abort
// came meanwhile, it is applied again.
func (w *wconn) unlessAborted(err error) error {
	if err != nil {
		return err
	}
	if w.aborted.Load() {
		_ = w.nc.SetDeadline(longAgo)
		return errAborted
	}
	return nil
}

// close aborts the exchanges in flight, drops every idle connection and
// makes get fail from now on.
func (p *conns) close() {
	p.mu.Lock()
	if !p.isClosed() {
		close(p.done)
	}
	for w := range p.busy {
		w.abort()
	}
	p.mu.Unlock()
	p.dropIdle()
}

// Read reads the current answer's body and notes its end.
func (w *wconn) Read(b []byte) (int, error) {
	n, err := w.body.Read(b)
	if err == io.EOF {
		w.eof = true
	}
	return n, err
}

// finish ends the exchange: a connection whose answer was read to its end
// and that nobody aborted goes back to the pool; any other is closed.
func (w *wconn) finish(resp *http.Response) {
	if w.stop != nil {
		w.stop()
	}
	if !w.eof || resp == nil || resp.Close || w.setDeadline(time.Time{}) != nil {
		w.discard()
		return
	}
	w.p.put(w)
}

// exchange sends one request (head and body in one write) on a connection
// from the pool and reads the answer's head, within ctx, deadline and, for
// the head, HeaderTimeout. A connection that was reused and fails before the
// first byte of an answer was closed by the worker while it sat idle: the
// turn is sent again on a new connection. On success the returned
// connection is reading the body, with deadline set on it; the caller ends
// with finish.
func (c *Client) exchange(ctx context.Context, p *payload, deadline time.Time) (*http.Response, *wconn, error) {
	for attempt := 0; ; attempt++ {
		w, err := c.conns.get(ctx, attempt > 0)
		if err != nil {
			// No connection (the worker refused it, or the client is
			// closed): nothing of the turn reached the worker.
			return nil, nil, fmt.Errorf("%w: %w", chat.ErrNotSent, err)
		}
		resp, retry, err := w.roundTrip(ctx, p, c.d.cfg.HeaderTimeout, deadline)
		if err == nil {
			return resp, w, nil
		}
		w.discard()
		if !retry || !w.reused || attempt > 0 || ctx.Err() != nil {
			return nil, nil, err
		}
	}
}

// roundTrip writes the request and reads the answer's head. retry says that
// nothing of an answer arrived.
func (w *wconn) roundTrip(ctx context.Context, p *payload, headerTimeout time.Duration, deadline time.Time) (resp *http.Response, retry bool, err error) {
	w.stop = context.AfterFunc(ctx, w.abort)
	fail := func(err error, retry bool) (*http.Response, bool, error) {
		w.stop()
		return nil, retry, err
	}
	// The head must come within headerTimeout, and within the turn.
	headDeadline, turnFirst := time.Now().Add(headerTimeout), false
	if deadline.Before(headDeadline) {
		headDeadline, turnFirst = deadline, true
	}
	ioError := func(err error) error {
		switch {
		case w.aborted.Load() || !errors.Is(err, os.ErrDeadlineExceeded):
			return err
		case turnFirst:
			return errTurnTimeout
		}
		return fmt.Errorf("%w (%s)", errHeaderTimeout, headerTimeout)
	}
	if err := w.setDeadline(headDeadline); err != nil {
		return fail(err, false)
	}
	if _, err := p.wire().WriteTo(w.nc); err != nil {
		return fail(ioError(err), true)
	}
	for {
		if _, err := w.br.Peek(1); err != nil {
			return fail(ioError(err), true)
		}
		resp, err = http.ReadResponse(w.br, nil)
		if err != nil {
			return fail(ioError(err), false)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 1xx: an interim answer with no body; the real one follows.
	}
	if err := w.setDeadline(deadline); err != nil {
		return fail(err, false)
	}
	w.body, w.eof = resp.Body, false
	resp.Body = w
	return resp, false, nil
}

// Close implements io.Closer for resp.Body; the reader's closeBody calls
// finish instead, which knows whether the connection may be reused.
func (w *wconn) Close() error { return nil }

// requestHead is the fixed start of every chat request's head to one
// worker; Content-Length and the blank line follow per request.
func requestHead(addr, apiKey string) []byte {
	h := "POST /v1/chat/completions HTTP/1.1\r\n" +
		"Host: " + addr + "\r\n" +
		"User-Agent: poolgate\r\n" +
		"Content-Type: application/json\r\n" +
		"Accept: text/event-stream, application/json\r\n"
	if apiKey != "" {
		h += "Authorization: Bearer " + apiKey + "\r\n"
	}
	return []byte(h + "Content-Length: ")
}

// appendLength ends a request head with the body's length.
func appendLength(b []byte, n int) []byte {
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, "\r\n\r\n"...)
}
