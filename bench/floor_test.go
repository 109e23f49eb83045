package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// Both reference proxies pass a request and its answer through unchanged,
// a streamed answer included, and stop with their context.
func TestReferenceProxies(t *testing.T) {
	worker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			_, _ = io.WriteString(w, "data: "+string(b)+strconv.Itoa(i)+"\n\n")
			_ = http.NewResponseController(w).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer worker.Close()
	for _, kind := range []string{proxyPipe, proxyReverse} {
		t.Run(kind, func(t *testing.T) {
			port, err := freePort()
			if err != nil {
				t.Fatal(err)
			}
			addr := "127.0.0.1:" + strconv.Itoa(port)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- runProxy(ctx, kind, addr, worker.Listener.Addr().String()) }()
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if c, err := net.Dial("tcp", addr); err == nil {
					_ = c.Close()
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("proxy did not listen: %v", err)
				}
			}
			tg := newTarget(kind, "http://"+addr, 4)
			defer tg.close()
			for range 3 { // the connection is kept alive across requests
				o := tg.chat(ctx, []byte("x"), true, nil)
				if o.err != nil || o.events != 3 {
					t.Fatalf("stream through the %s proxy: %d events, %v; want 3 events", kind, o.events, o.err)
				}
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("runProxy ended with %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("runProxy outlived its context by 5s")
			}
		})
	}
}
