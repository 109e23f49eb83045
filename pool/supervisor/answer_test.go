package supervisor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// scripted is an Answer that returns its events, then blocks until ctx
// ends and returns ctx's error.
type scripted struct {
	ctx    context.Context
	events []chat.Event
	closed chan struct{}
}

func newScripted(ctx context.Context, evs ...chat.Event) *scripted {
	return &scripted{ctx: ctx, events: evs, closed: make(chan struct{})}
}

func (s *scripted) Next() chat.Event {
	if len(s.events) > 0 {
		ev := s.events[0]
		s.events = s.events[1:]
		return ev
	}
	<-s.ctx.Done()
	return chat.Event{Type: chat.EventError, Err: s.ctx.Err()}
}

func (s *scripted) Close() { close(s.closed) }

func TestEventsQueue(t *testing.T) {
	var q Events
	if _, ok := q.Pop(); ok {
		t.Fatal("Pop on an empty queue = true")
	}
	for round := range 2 { // the second round reuses the storage
		q.Push(chat.Event{Type: chat.EventText, Text: "a"})
		q.Push(chat.Event{Type: chat.EventText, Text: "b"})
		for _, want := range []string{"a", "b"} {
			if ev, ok := q.Pop(); !ok || ev.Text != want {
				t.Fatalf("round %d: Pop = %+v, %v; want %q", round, ev, ok, want)
			}
		}
		if _, ok := q.Pop(); ok {
			t.Fatalf("round %d: Pop past the end = true", round)
		}
	}
}

func TestPump(t *testing.T) {
	t.Run("whole answer", func(t *testing.T) {
		a := newScripted(context.Background(), chat.Event{Type: chat.EventText, Text: "hi"}, chat.Event{Type: chat.EventDone})
		var got []chat.EventType
		for ev := range Pump(context.Background(), nil, a) {
			got = append(got, ev.Type)
		}
		if len(got) != 2 || got[0] != chat.EventText || got[1] != chat.EventDone {
			t.Errorf("events = %v, want text then done", got)
		}
		<-a.closed
	})
	t.Run("caller gone", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		a := newScripted(ctx, chat.Event{Type: chat.EventText, Text: "hi"})
		ch := Pump(ctx, nil, a)
		if ev := <-ch; ev.Type != chat.EventText {
			t.Fatalf("first event = %+v, want text", ev)
		}
		cancel()
		var last chat.Event
		for ev := range ch {
			last = ev
		}
		if last.Type != 0 && !errors.Is(last.Err, context.Canceled) {
			t.Errorf("after cancel the channel carried %+v, want nothing or the cancellation", last)
		}
		<-a.closed
	})
	t.Run("stop with nobody reading", func(t *testing.T) {
		evs := make([]chat.Event, 40) // more than the channel holds
		for i := range evs {
			evs[i] = chat.Event{Type: chat.EventText, Text: "x"}
		}
		a := newScripted(context.Background(), evs...)
		stop := make(chan struct{})
		Pump(context.Background(), stop, a)
		close(stop)
		select {
		case <-a.closed:
		case <-time.After(5 * time.Second):
			t.Fatal("the pump did not end after stop")
		}
	})
}
