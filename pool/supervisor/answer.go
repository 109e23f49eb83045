package supervisor

import (
	"context"

	"github.com/poolgate/poolgate/internal/chat"
)

// Events queues the events a driver's Answer has made and not yet returned:
// its Next pops one, and reads more from the worker when none waits.
type Events struct {
	q []chat.Event
	i int
}

// EventsIn returns an empty queue that fills buf's storage before it
// allocates its own: an array in the owner's struct spares a short answer
// any allocation for its queue.
func EventsIn(buf []chat.Event) Events { return Events{q: buf[:0]} }

// Len is the number of queued events.
func (e *Events) Len() int { return len(e.q) - e.i }

// Push queues ev, reusing the storage of events already taken.
func (e *Events) Push(ev chat.Event) {
	if e.i > 0 && e.i == len(e.q) {
		e.q, e.i = e.q[:0], 0
	}
	e.q = append(e.q, ev)
}

// Pop returns the next queued event, or false when none waits; the queue's
// storage is then reused by the next Push.
func (e *Events) Pop() (chat.Event, bool) {
	if e.i >= len(e.q) {
		e.q, e.i = e.q[:0], 0
		return chat.Event{}, false
	}
	ev := e.q[e.i]
	e.q[e.i] = chat.Event{}
	e.i++
	return ev, true
}

// Next is an Answer's Next over the queue: the next queued event, with step
// called to read more from the worker while none waits and the answer has
// not ended; past its end, an EventError with chat.ErrWorkerGone.
func (e *Events) Next(ended *bool, step func()) chat.Event {
	for {
		if ev, ok := e.Pop(); ok {
			return ev
		}
		if *ended {
			return chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}
		}
		step()
	}
}

// Pump serves a's events on a channel, the way Backend.Chat hands them out,
// for a driver whose Chat is its ChatPull read by a goroutine. The goroutine
// closes a and the channel after the closing event, or when stop is closed
// (the client is shutting down: a consumer that stopped reading must not
// hold it up). Once ctx ends nobody waits for the answer: its events are
// dropped, and only its error is offered, without waiting.
func Pump(ctx context.Context, stop <-chan struct{}, a Answer) <-chan chat.Event {
	out := make(chan chat.Event, 16)
	go func() {
		defer close(out)
		defer a.Close()
		for {
			ev := a.Next()
			last := ev.Type == chat.EventDone || ev.Type == chat.EventError
			switch {
			case ctx.Err() != nil:
				if ev.Type == chat.EventError {
					select {
					case out <- ev:
					default:
					}
				}
			default:
				select {
				case out <- ev:
				case <-ctx.Done():
				case <-stop:
					return
				}
			}
			if last {
				return
			}
		}
	}()
	return out
}
