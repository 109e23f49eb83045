package pool

import (
	"context"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// answer is a turn's answer as the router reads it: from a backend that
// lets the router read in its own goroutine (supervisor.Puller), or from
// the channel of any other backend.
type answer interface {
	// first returns the next event while the turn has not yet been handed
	// on (its first events, or the whole of a non-streaming answer).
	first() chat.Event
	// next returns the next event, or false once ctx ended: the caller
	// went away and the event, if any, is moot.
	next(ctx context.Context) (chat.Event, bool)
	// pending says whether next has an event without waiting for the
	// worker.
	pending() bool
	// close ends the turn; its answer may be unfinished.
	close()
}

// open starts t on b.
func open(ctx context.Context, b supervisor.Backend, t *chat.Turn) (answer, error) {
	if p, ok := b.(supervisor.Puller); ok {
		a, err := p.ChatPull(ctx, t)
		if err != nil {
			return nil, err
		}
		return pulled{a}, nil
	}
	c, err := b.Chat(ctx, t)
	if err != nil {
		return nil, err
	}
	return channel(c), nil
}

// pulled reads a supervisor.Answer.
type pulled struct{ a supervisor.Answer }

func (p pulled) first() chat.Event { return p.a.Next() }

// next checks ctx after the read: the answer ends early when ctx does, and
// what it then returns is the cancellation, not the worker's answer.
func (p pulled) next(ctx context.Context) (chat.Event, bool) {
	ev := p.a.Next()
	return ev, ctx.Err() == nil
}

// pending asks an answer that can tell (supervisor.Buffered).
func (p pulled) pending() bool {
	b, ok := p.a.(supervisor.Buffered)
	return ok && b.Buffered()
}

func (p pulled) close() { p.a.Close() }

// channel reads the answer of a backend's Chat. The backend closes it when
// its turn ends (on ctx too), so close has nothing to do.
type channel <-chan chat.Event

// first waits for the backend, which ends the answer itself when ctx does.
func (c channel) first() chat.Event {
	ev, ok := <-c
	if !ok {
		return chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}
	}
	return ev
}

func (c channel) next(ctx context.Context) (chat.Event, bool) {
	select {
	case ev, ok := <-c:
		if !ok {
			return chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}, true
		}
		return ev, true
	case <-ctx.Done():
		return chat.Event{}, false
	}
}

func (c channel) pending() bool { return len(c) > 0 }

func (c channel) close() {}
