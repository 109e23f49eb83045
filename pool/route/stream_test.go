package route

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// scripted is one fake worker whose answer the test hands over event by
// event (its first event is "a"); turn is the context of the turn it was
// given, feed its answer.
type scripted struct {
	turn chan context.Context
	feed chan *chattest.Feed
}

func (s *scripted) start(ctx context.Context, _ string, _ *chat.Turn) (chat.Answer, error) {
	f := chattest.NewFeed(ctx, 8)
	f.Send(chat.Event{Type: chat.EventText, Text: "a"})
	s.turn <- ctx
	s.feed <- f
	return f, nil
}

func pullPool(t *testing.T) (*Router, *Pool, *scripted) {
	t.Helper()
	w := &scripted{turn: make(chan context.Context, 1), feed: make(chan *chattest.Feed, 1)}
	f := supervisortest.New()
	f.Start = w.start
	p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, "a"), nil)
	waitReady(t, p, "a")
	return NewRouter(RouterConfig{}, p, nil, nil, p.log), p, w
}

func inFlight(p *Pool) int { return p.Snapshot().InFlight }

// pullStream starts a streamed turn whose worker has sent "a".
func pullStream(t *testing.T, ctx context.Context, r *Router, w *scripted) *turnStream {
	t.Helper()
	s, err := open(ctx, r, &chat.Request{Stream: true, Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOpenReadsTheStreamOnTheCallersGoroutine(t *testing.T) {
	r, p, w := pullPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := pullStream(t, ctx, r, w)
	defer s.Close()
	// The first event was read before Pull returned.
	if !s.Buffered() {
		t.Fatal("the first event is not at hand")
	}
	if ev, ok := s.Next(); !ok || ev.Text != "a" {
		t.Fatalf("first event %+v, %v", ev, ok)
	}
	if s.Buffered() {
		t.Fatal("pending with nothing sent")
	}
	feed := <-w.feed
	feed.Send(chat.Event{Type: chat.EventText, Text: "b"})
	feed.Send(chat.Event{Type: chat.EventDone, Finish: chat.FinishStop})
	if !s.Buffered() {
		t.Fatal("an event sent is not at hand")
	}
	if ev, ok := s.Next(); !ok || ev.Text != "b" {
		t.Fatalf("second event %+v, %v", ev, ok)
	}
	if ev, ok := s.Next(); !ok || ev.Type != chat.EventDone {
		t.Fatalf("closing event %+v, %v", ev, ok)
	}
	// The answer is over: its slot is free before Close.
	if n := inFlight(p); n != 0 {
		t.Errorf("%d turns in flight after the closing event", n)
	}
	if _, ok := s.Next(); ok {
		t.Error("Next after the closing event")
	}
}

func TestOpenClosedMidStreamEndsTheTurn(t *testing.T) {
	r, p, w := pullPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := pullStream(t, ctx, r, w)
	turn := <-w.turn
	if n := inFlight(p); n != 1 {
		t.Fatalf("%d turns in flight during the answer", n)
	}
	s.Close()
	s.Close() // twice is fine
	if n := inFlight(p); n != 0 {
		t.Errorf("%d turns in flight after Close", n)
	}
	select {
	case <-turn.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the worker's turn was not cancelled")
	}
	if _, ok := s.Next(); ok {
		t.Error("Next after Close")
	}
}

func TestOpenEndsWhenTheRequestDoes(t *testing.T) {
	r, p, w := pullPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	s := pullStream(t, ctx, r, w)
	defer s.Close()
	s.Next()
	done := make(chan bool)
	go func() {
		ev, _ := s.Next() // waits for the worker, which sends nothing more
		_, more := s.Next()
		done <- ev.Type == chat.EventError && errors.Is(ev.Err, context.Canceled) && !more
	}()
	cancel()
	select {
	case ok := <-done:
		if !ok {
			t.Error("the answer did not end with the request's cancellation")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Next still waits after the request ended")
	}
	testenv.WaitFor(t, 2*time.Second, "the slot freed", func() bool { return inFlight(p) == 0 })
}
