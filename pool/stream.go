package pool

import (
	"context"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Stream is an answer the caller reads on its own goroutine (Router.Pull):
// each Next reads from the worker only when no event waits. It is not safe
// for concurrent use.
type Stream struct {
	f forwarding
	q supervisor.Events // handled, not yet taken
	// qbuf is q's first storage: a whole non-streaming answer (its text
	// and its closing event) fits.
	qbuf   [2]chat.Event
	src    answer
	cancel context.CancelFunc
	// over is set once the answer ended (its closing event is queued) or
	// its caller went away; the turn is then released.
	over bool
}

// Next returns the answer's next event; it is false once the answer is
// over: after the closing event (EventDone or EventError), or once the
// request's context ended, with or without one.
func (s *Stream) Next() (chat.Event, bool) {
	for {
		if ev, ok := s.q.Pop(); ok {
			return ev, true
		}
		if s.over {
			return chat.Event{}, false
		}
		s.step()
	}
}

// step reads and handles the worker's next event.
func (s *Stream) step() {
	ev, ok := s.src.next(s.f.ctx)
	switch {
	case !ok:
		s.f.cancelled()
		s.end()
	case s.f.handle(ev):
		s.end()
	}
}

// Pending says whether Next has an event without waiting for the worker:
// events the worker already sent are handled to find out.
func (s *Stream) Pending() bool {
	for s.q.Len() == 0 && !s.over && s.src.pending() {
		s.step()
	}
	return s.q.Len() > 0
}

// Close ends the turn, unfinished or not, and frees its slot; events not
// taken yet are dropped. Safe to call more than once.
func (s *Stream) Close() {
	s.end()
	s.q = supervisor.Events{}
}

// end releases the turn once.
func (s *Stream) end() {
	if s.src == nil {
		return
	}
	s.over = true
	s.src.close()
	s.f.slot.Release()
	s.cancel()
	s.src = nil
}

// channel serves the stream on a channel, as Chat hands answers out: at
// once when the answer is complete, else from a goroutine (tracked by wg)
// that closes the stream and the channel at its end, or once ctx ends.
func (s *Stream) channel(ctx context.Context, wg *sync.WaitGroup) <-chan chat.Event {
	if s.over {
		out := make(chan chat.Event, s.q.Len())
		for {
			ev, ok := s.q.Pop()
			if !ok {
				break
			}
			out <- ev
		}
		close(out)
		return out
	}
	out := make(chan chat.Event, 16)
	wg.Go(func() {
		defer close(out)
		defer s.Close()
		for {
			ev, ok := s.Next()
			if !ok {
				return
			}
			select {
			case out <- ev:
			case <-ctx.Done():
				return
			}
		}
	})
	return out
}
