package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// A worker that drops idle keep-alive connections costs the next turn
// nothing: a connection that fails before any answer has the turn sent again
// on a new one.
func TestIdleConnectionsClosedByWorker(t *testing.T) {
	f := startFake(t, sseReply, func(s *http.Server) { s.IdleTimeout = 50 * time.Millisecond })
	c := connect(t, newDriver(t, Config{}), f.ep)
	var open []chat.Answer // four answers at once: four pooled connections
	for range 4 {
		a, err := c.Start(context.Background(), userTurn("x"))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		open = append(open, a)
	}
	for _, a := range open {
		if got := collect(t, a); got.err != nil {
			t.Fatalf("answer: %v", got.err)
		}
	}
	before := f.conns.n.Load()
	time.Sleep(300 * time.Millisecond) // the worker closes the idle connections
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if text, err := pullTurn(c); err != nil || text != "ok" {
				t.Errorf("turn after the worker closed the idle connections = %q, %v; want it answered", text, err)
			}
		})
	}
	wg.Wait()
	if n := f.conns.n.Load() - before; n < 1 || n > 4 {
		t.Errorf("four turns dialled %d connections, want 1 to 4", n)
	}
}

// pullTurn runs a turn and reads its answer, from any goroutine.
func pullTurn(c *Client) (string, error) {
	a, err := c.Start(context.Background(), userTurn("x"))
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, ev := range chattest.Collect(a) {
		switch ev.Type {
		case chat.EventText:
			text.WriteString(ev.Text)
		case chat.EventError:
			return text.String(), ev.Err
		}
	}
	return text.String(), nil
}

// alive tells an idle connection the worker closed, or that carries bytes
// nobody asked for, from a usable one.
func TestAlive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dial := func() (client, server net.Conn) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err = ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close(); server.Close() })
		return client, server
	}
	settle := func(c net.Conn, want bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for alive(c) != want {
			if time.Now().After(deadline) {
				t.Fatalf("alive = %v, want %v", !want, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	c, s := dial()
	if !alive(c) {
		t.Errorf("alive(open idle connection) = false")
	}
	s.Close()
	settle(c, false)

	c, s = dial()
	_, _ = s.Write([]byte("x"))
	settle(c, false)
}

func TestHeaderTimeout(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		select { // answers only once the gateway gave up
		case <-r.Context().Done():
		case <-time.After(wait):
		}
	})
	c := connect(t, newDriver(t, Config{HeaderTimeout: 200 * time.Millisecond}), f.ep)
	start := time.Now()
	_, err := c.Start(context.Background(), userTurn("x"))
	if !errors.Is(err, chat.ErrWorkerGone) || !strings.Contains(err.Error(), "no response headers in time (200ms)") {
		t.Errorf("Start = %v, want ErrWorkerGone saying no headers came in time", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Start took %s with a 200ms header timeout", d)
	}
}

// MaxConnsPerHost makes a turn wait for a connection, within its context.
func TestMaxConnsPerHost(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		sseReply(w, r)
	})
	c := connect(t, newDriver(t, Config{MaxConnsPerHost: 1}), f.ep)
	before := f.conns.n.Load()
	type started struct {
		a   chat.Answer
		err error
	}
	first := make(chan started, 1)
	go func() {
		a, err := c.Start(context.Background(), userTurn("x"))
		first <- started{a, err}
	}()
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if a, err := c.Start(ctx, userTurn("x")); !errors.Is(err, context.DeadlineExceeded) {
		if a != nil {
			a.Close()
		}
		t.Errorf("second turn while the only connection is busy = %v, want the context's deadline", err)
	}
	close(release)
	s := <-first
	if s.err != nil {
		t.Fatalf("first turn: %v", s.err)
	}
	if a := collect(t, s.a); a.err != nil {
		t.Fatalf("first turn: %v", a.err)
	}
	if a := runTurn(t, c, userTurn("x")); a.err != nil {
		t.Fatalf("third turn: %v", a.err)
	}
	if n := f.conns.n.Load() - before; n != 1 {
		t.Errorf("turns used %d connections, want 1", n)
	}
}

// A large transcript goes out whole (head and body in one vectored write).
func TestLargeRequestBody(t *testing.T) {
	f := startFake(t, sseReply)
	c := connect(t, newDriver(t, Config{}), f.ep)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	for range 2 {                                    // the second from a pooled buffer
		if a := runTurn(t, c, userTurn(big)); a.err != nil {
			t.Fatalf("chat: %v", a.err)
		}
		f.mu.Lock()
		var req wireRequest
		err := json.Unmarshal(f.body, &req)
		f.mu.Unlock()
		if err != nil || len(req.Messages) != 1 || *req.Messages[0].Content != big {
			t.Fatalf("the worker got a body that does not carry the transcript (%v)", err)
		}
	}
}

// A turn given up before its end closes its connection instead of pooling
// it with an answer half read; the next turn dials anew.
func TestAbandonedAnswerNotReused(t *testing.T) {
	gone := make(chan struct{}, 1)
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sse(text("partial")))
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			gone <- struct{}{}
		case <-time.After(wait):
		}
	})
	c := connect(t, newDriver(t, Config{}), f.ep)
	a, err := c.Start(context.Background(), userTurn("x"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if ev, ok := a.Next(); !ok || ev.Type != chat.EventText || ev.Text != "partial" {
		a.Close()
		t.Fatalf("first event = %+v, %v; want the partial text", ev, ok)
	}
	a.Close()
	if n := busyConns(c); n != 0 {
		t.Errorf("%d connections still busy after the answer was closed", n)
	}
	select {
	case <-gone:
	case <-time.After(2 * time.Second):
		t.Fatal("the worker's connection stayed open after the turn was given up")
	}
}

// An answer marked Connection: close is read whole, and its connection is
// not pooled.
func TestConnectionCloseAnswer(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		sseReply(w, r)
	})
	c := connect(t, newDriver(t, Config{}), f.ep)
	before := f.conns.n.Load()
	for range 3 {
		if a := runTurn(t, c, userTurn("x")); a.err != nil || a.text != "ok" {
			t.Fatalf("turn = %+v, want ok", a)
		}
	}
	if n := f.conns.n.Load() - before; n != 3 {
		t.Errorf("3 turns answered with Connection: close used %d connections, want 3", n)
	}
}

// A turn whose RequestTimeout ends before HeaderTimeout is cut at the
// former, and says so.
func TestRequestTimeoutBeforeHeaders(t *testing.T) {
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(wait):
		}
	})
	c := connect(t, newDriver(t, Config{RequestTimeout: 200 * time.Millisecond}), f.ep)
	start := time.Now()
	_, err := c.Start(context.Background(), userTurn("x"))
	if !errors.Is(err, chat.ErrWorkerGone) || !strings.Contains(err.Error(), "no answer within 200ms") {
		t.Errorf("Start = %v, want ErrWorkerGone saying no answer came within 200ms", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Start took %s with a 200ms request timeout", d)
	}
}

// Close aborts a turn still waiting for a connection under MaxConnsPerHost.
func TestCloseAbortsWaitForConnection(t *testing.T) {
	entered := make(chan struct{}, 1)
	f := startFake(t, func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	})
	c := connect(t, newDriver(t, Config{MaxConnsPerHost: 1}), f.ep)
	// start runs a turn that should never get an answer; one it gets
	// anyway is closed at once, so that Close is not kept waiting.
	start := func(errs chan<- error) {
		a, err := c.Start(context.Background(), userTurn("x"))
		if a != nil {
			a.Close()
		}
		errs <- err
	}
	first := make(chan error, 1)
	go start(first)
	<-entered
	second := make(chan error, 1)
	go start(second)
	time.Sleep(50 * time.Millisecond) // the second turn waits for the connection
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	for _, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if !errors.Is(err, chat.ErrWorkerGone) {
				t.Errorf("turn cut by Close = %v, want ErrWorkerGone", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a turn outlived Close by 2s")
		}
	}
	<-closed
}
